"""ListOps: every label checked by a recursive-descent evaluator written here from the grammar
(independent of the generator, which computes values as it builds the tree), the generator's
limits (lengths, depth, arguments), seeding, validation errors and the input-blind baseline."""

import math
import statistics

import pytest
import torch

from rnnlab import config
from rnnlab.tasks import TASKS, ListOpsTask, build_task
from rnnlab.tasks.listops import longest

NAMES = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "[MIN", "[MAX", "[MED", "[SM", "]"]
OPS = {
    "[MIN": min,
    "[MAX": max,
    "[MED": lambda a: int(statistics.median(a)),  # LRA: int(np.median), a float median truncated
    "[SM": lambda a: sum(a) % 10,
}


def gen(seed):
    return torch.Generator().manual_seed(seed)


def evaluate(words):
    """Parse ``expr := digit | op expr expr+ ']'`` and return (value, depth, most arguments)."""
    pos = 0

    def expr():
        nonlocal pos
        w = words[pos]
        pos += 1
        if w.isdigit():
            return int(w), 1, 0
        assert w in OPS, f"unexpected token {w!r} at {pos - 1}"
        args, depth, width = [], 0, 0
        while words[pos] != "]":
            v, d, k = expr()
            args.append(v)
            depth, width = max(depth, d), max(width, k)
        pos += 1  # the closing bracket
        assert len(args) >= 2, "an operator has at least two arguments"
        return OPS[w](args), depth + 1, max(width, len(args))

    result = expr()
    assert pos == len(words), "trailing tokens after the expression"
    return result


def test_evaluator_on_hand_written_expressions():
    assert evaluate("[MAX 2 9 [MIN 4 7 ] 0 ]".split()) == (
        9,
        3,
        4,
    )  # depth counts the digits' level, as the generator's max_depth
    assert evaluate("[MED 3 8 ]".split())[0] == 5  # (3 + 8) / 2 = 5.5, truncated
    assert evaluate("[SM 9 9 [MED 1 2 3 ] ]".split())[0] == 0  # 9 + 9 + 2 = 20
    assert evaluate(["7"]) == (7, 1, 0)


@pytest.mark.parametrize("kw", [{}, {"max_depth": 3, "max_args": 3, "value_p": 0.6, "min_length": 4}])
def test_labels_agree_with_an_independent_evaluator(kw):
    opts = {"min_length": 10, "max_length": 120, "max_depth": 6, "max_args": 5, **kw}
    t = ListOpsTask(**opts)
    b = t.make(600, gen(0))
    assert b.lengths.min() > opts["min_length"] and b.lengths.max() < opts["max_length"]
    assert b.x.shape == (600, int(b.lengths.max())) and t.num_tokens == 15 and t.output_size == 10
    widths = set()
    for i in range(600):
        n = int(b.lengths[i])
        value, depth, width = evaluate([NAMES[k] for k in b.x[i, :n].tolist()])
        assert value == int(b.y[i]) and depth <= opts["max_depth"] and width <= opts["max_args"]
        widths.add(width)
        assert (b.x[i, n:] == 0).all()  # padding
    assert max(widths) == opts["max_args"]
    assert set(b.y.tolist()) == set(range(10))


def test_lra_lengths_and_structure():
    """LRA's own settings (default): lengths strictly between 500 and 2000."""
    t = ListOpsTask()
    b = t.make(24, gen(1))
    assert b.lengths.min() > 500 and b.lengths.max() < 2000
    for i in range(24):
        n = int(b.lengths[i])
        value, depth, width = evaluate([NAMES[k] for k in b.x[i, :n].tolist()])
        assert value == int(b.y[i]) and 2 <= depth <= 10 and width <= 10


def test_longest_tree():
    assert longest(1, 10) == 1 and longest(2, 3) == 5 and longest(3, 2) == 2 + 2 * 4
    full = ListOpsTask(min_length=0, max_length=10**6, max_depth=3, max_args=2, value_p=1.0)
    assert full.make(5, gen(0)).lengths.tolist() == [longest(3, 2)] * 5  # every node an operator


def test_seeded_and_deterministic():
    t = ListOpsTask(min_length=10, max_length=80, max_depth=5, max_args=4, val_size=20, test_size=20)
    a, b, c = t.make(8, gen(1)), t.make(8, gen(1)), t.make(8, gen(2))
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and torch.equal(a.lengths, b.lengths)
    assert not torch.equal(a.lengths, c.lengths) or not torch.equal(a.x, c.x)
    u = ListOpsTask(min_length=10, max_length=80, max_depth=5, max_args=4, val_size=20, test_size=20)
    v1, v2 = next(iter(t.eval_batches("val", 20))), next(iter(u.eval_batches("val", 20)))
    assert torch.equal(v1.x, v2.x) and v1.lengths is not None
    assert not torch.equal(v1.y, next(iter(t.eval_batches("test", 20))).y)


def test_baseline_is_the_best_input_blind_prediction():
    """The baseline is the validation labels' entropy: the loss, through ``task.loss``, of their
    own frequencies as a fixed prediction; any other fixed prediction scores more (here: the
    frequencies of an independent sample)."""
    t = ListOpsTask(min_length=10, max_length=120, max_depth=6, max_args=5, val_size=3000)
    val = t.eval_set("val")
    freq = torch.bincount(val.y, minlength=10).double() / val.size
    base = t.baseline()
    assert t.loss(freq.log().expand(val.size, -1), val).item() == pytest.approx(base["loss"], rel=1e-9)
    assert base["accuracy"] == pytest.approx(float(freq.max()))
    other = torch.bincount(t.make(3000, gen(9)).y, minlength=10).double() / 3000
    fixed = t.loss(other.log().expand(val.size, -1), val).item()
    assert base["loss"] <= fixed < base["loss"] + 0.02  # same law: an independent sample comes close


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"max_depth": 1}, "max_depth >= 2"),
        ({"max_args": 1}, "max_args >= 2"),
        ({"min_length": 100, "max_length": 101}, "max_length >= min_length \\+ 2"),
        ({"value_p": 0.0}, "0 < value_p <= 1"),
        ({"max_depth": 3, "max_args": 3}, "no tree of max_depth=3, max_args=3 has more than 17 tokens"),
        ({"min_length": -1}, "min_length >= 0"),
    ],
)
def test_bad_options_say_what_was_expected(kw, needle):
    with pytest.raises(ValueError, match=needle):
        ListOpsTask(**kw)


def test_settings_too_rare_to_meet_are_named():
    t = ListOpsTask(min_length=200, max_length=205, max_depth=4, max_args=10, value_p=0.05)
    t.MAX_TRIES = 200
    with pytest.raises(ValueError, match="too rare"):
        t.make(1, gen(0))


def test_registry_and_preset():
    assert TASKS["listops"] is ListOpsTask
    cfg = config.load("field/listops-lstm")
    task = build_task(cfg.task)
    assert isinstance(task, ListOpsTask) and (task.min_length, task.max_length) == (500, 2000)


def test_tree_law_without_the_length_filter():
    """With every length kept, the root is an operator with probability value_p, its operation
    uniform over the four and its argument count uniform over 2..max_args (LRA's generate_tree)."""
    N = 6000
    t = ListOpsTask(min_length=0, max_length=10**6, max_depth=3, max_args=4, value_p=0.4)
    b = t.make(N, gen(4))
    is_op = b.lengths > 1
    tol = lambda p, n: 5 * math.sqrt(p * (1 - p) / n)  # noqa: E731
    assert abs(is_op.double().mean().item() - 0.4) < tol(0.4, N)
    ops = b.x[is_op, 0]
    n_ops = int(is_op.sum())
    for op in range(10, 14):
        assert abs((ops == op).double().mean().item() - 0.25) < tol(0.25, n_ops)
    roots = [evaluate([NAMES[k] for k in b.x[i, : int(b.lengths[i])].tolist()]) for i in range(N) if is_op[i]]
    assert all(2 <= d <= 3 for _, d, _ in roots)
    # the root's argument count: the number of top-level arguments, counted by a bracket walk
    counts = []
    for i in range(N):
        if not is_op[i]:
            continue
        depth, top = 0, 0
        for k in b.x[i, 1 : int(b.lengths[i]) - 1].tolist():
            if depth == 0:
                top += 1
            depth += 1 if k >= 10 and k != 14 else (-1 if k == 14 else 0)
        counts.append(top)
    assert len(counts) == n_ops
    for k in (2, 3, 4):
        share = sum(c == k for c in counts) / len(counts)
        assert abs(share - 1 / 3) < tol(1 / 3, len(counts)), (k, share)
