"""Selective copying, multi-query associative recall and induction heads: layout, seeding,
validation errors, and each memoryless baseline against a memoryless predictor counted from
data (a table of p(y | x_t, t), no memory) and against the closed form through the task's loss."""

import math

import pytest
import torch

from rnnlab import config
from rnnlab.tasks import TASKS, InductionTask, MQARTask, SelectiveCopyTask, build_task


def gen(seed):
    return torch.Generator().manual_seed(seed)


def answers(task, b):
    """(t, x_t, y) at the positions the loss counts: the mask, or the last step."""
    if task.readout == "last":
        t = torch.full((b.size,), b.x.shape[1] - 1)
        return t, b.x[torch.arange(b.size), t], b.y
    t = torch.arange(b.x.shape[1]).expand_as(b.x)
    return t[b.mask], b.x[b.mask], b.y[b.mask]


def memoryless_scores(task, n, seed):
    """Cross-entropy and accuracy on the validation set of the predictor p(y | x_t, t) counted
    from ``n`` fresh sequences (add-0.5 smoothed)."""
    T = task.make(1, gen(0)).x.shape[1]
    counts = torch.zeros(T, task.num_tokens, task.output_size, dtype=torch.float64)
    t, x, y = answers(task, task.make(n, gen(seed)))
    counts.index_put_((t, x, y), torch.ones(len(y), dtype=torch.float64), accumulate=True)
    logp = (counts + 0.5).log() - (counts + 0.5).sum(-1, keepdim=True).log()
    t, x, y = answers(task, task.eval_set("val"))
    table = logp[t, x]
    return -table[torch.arange(len(y)), y].mean().item(), (table.argmax(-1) == y).double().mean().item()


TASK_CASES = {
    "selective_copy": lambda: SelectiveCopyTask(K=4, L=12, alphabet=5, val_size=4000),
    "mqar": lambda: MQARTask(num_kv_pairs=2, T=16, vocab=16, val_size=4000),
    "induction": lambda: InductionTask(T=12, alphabet=6, val_size=8000),
}


@pytest.mark.parametrize("name", sorted(TASK_CASES))
def test_baseline_is_the_best_memoryless_predictor(name):
    task = TASK_CASES[name]()
    loss, acc = memoryless_scores(task, 40000, seed=5)
    base = task.baseline()
    assert loss == pytest.approx(base["loss"], rel=0.02)
    assert acc == pytest.approx(base["accuracy"], abs=0.025)


@pytest.mark.parametrize("name", sorted(TASK_CASES))
def test_closed_form_through_the_tasks_loss(name):
    """Uniform logits over the answer classes score ``baseline()`` through ``task.loss``: the
    positions outside the mask, where such logits would cost 1e9, do not count."""
    task = TASK_CASES[name]()
    b = task.eval_set("val")
    shape = (*b.x.shape, task.output_size) if task.readout == "all" else (b.size, task.output_size)
    logits = torch.full(shape, -1e9)
    answer_classes = {"selective_copy": slice(1, None), "mqar": slice(task.num_tokens // 2, None)}.get(
        name, slice(None)
    )
    logits[..., answer_classes] = 0.0
    assert task.loss(logits, b).item() == pytest.approx(task.baseline()["loss"], rel=1e-6)
    sums = task.metric_sums(logits, b)
    assert sums["loss"][1] == {"selective_copy": 4, "mqar": 2, "induction": 1}[name] * b.size
    perfect = torch.nn.functional.one_hot(b.y, task.output_size).double() * 50
    s = task.metric_sums(perfect, b)
    assert s["accuracy"][0] == s["accuracy"][1] and s["loss"][0] / s["loss"][1] < 1e-6


def test_closed_forms():
    assert SelectiveCopyTask().baseline()["loss"] == pytest.approx(math.log(14))
    assert MQARTask().baseline() == pytest.approx({"loss": math.log(4096), "accuracy": 1 / 4096})
    assert MQARTask(vocab=17, num_kv_pairs=2).baseline()["loss"] == pytest.approx(math.log(9))  # values 8..16
    assert InductionTask().baseline() == pytest.approx({"loss": math.log(16), "accuracy": 1 / 16})


def test_selective_copy_layout():
    K, L, a = 4, 12, 5
    t = SelectiveCopyTask(K=K, L=L, alphabet=a)
    b = t.make(3000, gen(0))
    assert b.x.shape == b.y.shape == b.mask.shape == (3000, L + 2 * K) and t.num_tokens == a + 2
    head = b.x[:, : L + K]
    assert ((head != 0).sum(1) == K).all() and head.max() <= a
    assert (b.x[:, L + K :] == a + 1).all() and b.mask[:, L + K :].all() and not b.mask[:, : L + K].any()
    for i in range(50):  # the data tokens, in order, are the targets
        assert torch.equal(head[i][head[i] != 0], b.y[i, L + K :])
    assert (b.y[:, : L + K] == 0).all() and set(b.y[:, L + K :].unique().tolist()) == set(range(1, a + 1))
    # each of the L + K context positions holds a data token with probability K / (L + K)
    share = (head != 0).double().mean(0)
    assert (share - K / (L + K)).abs().max() < 5 * math.sqrt(0.25 / 3000)


def test_mqar_layout():
    n, T, V = 3, 20, 16
    t = MQARTask(num_kv_pairs=n, T=T, vocab=V, random_non_queries=False)
    b = t.make(500, gen(1))
    keys, values = b.x[:, 0 : 2 * n : 2], b.x[:, 1 : 2 * n : 2]
    assert keys.min() >= 1 and keys.max() < V // 2 and values.min() >= V // 2 and values.max() < V
    assert all(len(set(k.tolist())) == n for k in keys) and all(len(set(v.tolist())) == n for v in values)
    assert (b.mask.sum(1) == n).all() and not b.mask[:, : 2 * n].any()
    assert ((b.mask.nonzero()[:, 1] - 2 * n) % 2 == 0).all()  # queries at even offsets after the pairs
    for i in range(100):
        pairs = dict(zip(keys[i].tolist(), values[i].tolist(), strict=True))
        q = b.mask[i].nonzero().flatten()
        assert sorted(b.x[i, q].tolist()) == sorted(pairs)  # every key queried once
        assert [pairs[k] for k in b.x[i, q].tolist()] == b.y[i, q].tolist()
        rest = torch.ones(T, dtype=torch.bool)
        rest[: 2 * n] = False
        rest[q] = False
        assert (b.x[i, rest] == 0).all()
    noisy = MQARTask(num_kv_pairs=n, T=T, vocab=V).make(500, gen(1))
    assert noisy.x[:, 2 * n :][~noisy.mask[:, 2 * n :]].unique().numel() == V  # noise from the whole vocabulary


@pytest.mark.parametrize("power_a", [1.0, 0.01])
def test_mqar_query_gaps_follow_the_power_law(power_a):
    """One pair: the query's gap g (position 2 + 2g) has P(g) = (g+1)^(a-1) / sum, computed here
    from the formula; a = 1 is uniform."""
    t = MQARTask(num_kv_pairs=1, T=22, vocab=8, power_a=power_a)
    N = 40000
    b = t.make(N, gen(2))
    g = (b.mask.int().argmax(1) - 2) // 2
    space = (22 - 2) // 2
    w = [(k + 1) ** (power_a - 1) for k in range(space)]
    p = torch.tensor([v / sum(w) for v in w], dtype=torch.float64)
    observed = torch.bincount(g, minlength=space).double() / N
    assert ((observed - p).abs() <= 5 * (p * (1 - p) / N).sqrt() + 1e-4).all(), (observed, p)


def test_induction_layout():
    T, a = 10, 4
    t = InductionTask(T=T, alphabet=a)
    b = t.make(4000, gen(3))
    assert b.x.shape == (4000, T) and b.y.shape == (4000,) and t.output_size == a
    trig = b.x == a
    assert (trig.sum(1) == 2).all() and trig[:, -1].all()
    p = trig[:, :-1].int().argmax(1)
    assert torch.equal(b.y, b.x[torch.arange(4000), p + 1]) and (b.y < a).all()
    assert set(p.tolist()) == set(range(T - 2))  # the first trigger anywhere it leaves room for the answer


@pytest.mark.parametrize("name", sorted(TASK_CASES))
def test_seeded_and_deterministic(name):
    t = TASK_CASES[name]()
    a, b, c = t.make(16, gen(1)), t.make(16, gen(1)), t.make(16, gen(2))
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert not torch.equal(a.x, c.x)
    v1 = next(iter(TASK_CASES[name]().eval_batches("val", 10)))
    v2 = next(iter(TASK_CASES[name]().eval_batches("val", 10)))
    test = next(iter(t.eval_batches("test", 10)))
    assert torch.equal(v1.x, v2.x) and not torch.equal(v1.x, test.x)
    assert (v1.mask is None) == (t.readout == "last")  # evaluation batches keep the answer mask


@pytest.mark.parametrize(
    "cls,kwargs,needle",
    [
        (SelectiveCopyTask, {"K": 0}, "K to be a positive integer"),
        (SelectiveCopyTask, {"alphabet": 1}, "alphabet >= 2"),
        (MQARTask, {"num_kv_pairs": 8, "T": 30}, "T >= 4 \\* num_kv_pairs"),
        (MQARTask, {"num_kv_pairs": 8, "vocab": 16}, "vocab >= 18"),
        (MQARTask, {"power_a": 0.0}, "power_a > 0"),
        (InductionTask, {"T": 2}, "T >= 3"),
        (InductionTask, {"alphabet": 1}, "alphabet >= 2"),
        (SelectiveCopyTask, {"val_size": 0}, "val_size"),
    ],
)
def test_bad_options_say_what_was_expected(cls, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        cls(**kwargs)


def test_registry_and_presets():
    for key, cls in (("selective_copy", SelectiveCopyTask), ("mqar", MQARTask), ("induction", InductionTask)):
        assert TASKS[key] is cls and cls.name == key
        cfg = config.load(f"field/{key}-lstm")
        task = build_task(cfg.task)
        assert isinstance(task, cls) and task.baseline()["loss"] > 0


def test_evaluation_sets_are_no_training_stream():
    """The trainer seeds its stream with data_seed = train.seed + 1; the older tasks' evaluation
    generators (seeds 1 and 2 at task seed 0) coincide with those of train.seed 0 and 1, the
    new tasks' do not (torch's CPU generator keeps a seed's low 32 bits: checked modulo 2**32)."""
    from rnnlab.tasks import CopyTask, ListOpsTask

    old = CopyTask(K=3, L=5, val_size=8, test_size=8)
    assert torch.equal(old.make(8, gen(1)).x, old.eval_set("val").x)  # the older tasks, as documented
    for cls in (SelectiveCopyTask, MQARTask, InductionTask, ListOpsTask):
        seeds = [(cls.EVAL_SEED_OFFSET + 1_000_003 * s + k) % 2**32 for s in range(1600) for k in (1, 2)]
        assert min(seeds) > 2**31, cls
    t = InductionTask(T=8, val_size=16, test_size=16)
    for data_seed in range(1, 50):
        first = t.make(16, gen(data_seed)).x
        assert not torch.equal(first, t.eval_set("val").x) and not torch.equal(first, t.eval_set("test").x)
