"""An ensemble's memory check (rnnlab.ensemble.member_bytes) against what members really hold.

Before: the estimate took T from the first training batch and 32 values per unit for every
cell; on ListOps (lengths up to 2,000, each batch padded to its longest) an ensemble of three
minGRU members passed the check and then grew to 22 GB. Now T is the task's bound
(``Task.max_steps``) and each cell states what its step holds (``Cell.step_values``). Measured
here: the bytes of the tensors autograd saves in a real batched training step on a batch of the
task's longest sequences (deterministic), and, marked slow, the peak resident memory a real
ensemble adds in a subprocess (training and evaluation).
"""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rnnlab import config
from rnnlab import ensemble as ens
from rnnlab.model import build_model
from rnnlab.stacked_model import StackedModel
from rnnlab.tasks import build_task

SRC = str(Path(__file__).resolve().parents[1] / "src")
# ListOps of 20 to 399 tokens: a first batch is shorter than the longest a later batch can be
LISTOPS = ["task.min_length=20", "task.max_length=400", "task.max_depth=6", "task.max_args=5"]
# a scan cell of each kind and step-loop cells (the LSTM's batched loop, the sLSTM's)
CELLS = {"mingru": 64, "lru": 32, "s4d": 8, "mamba": 8, "lstm": 32, "slstm": 32}


def _cfg(cell: str, width: int, extra=()):
    return config.load(
        "field/listops-lstm",
        [
            *LISTOPS,
            f'model.cell="{cell}"',
            f"model.hidden_size={width}",
            "task.val_size=8",
            "task.test_size=8",
            "train.batch_size=4",
            "train.eval_batch_size=4",
            *extra,
        ],
    )


def _saved_bytes(step) -> int:
    """Bytes of the distinct storages autograd saves while ``step`` runs."""
    storages: dict = {}

    def pack(t):
        s = t.untyped_storage()
        storages[(s.data_ptr(), s.nbytes())] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(storages.values())


def test_listops_bounds_every_batch_by_its_max_steps():
    task = build_task(_cfg("mingru", 4).task)
    T = task.max_steps("train", 4)
    assert T == 399
    g = torch.Generator().manual_seed(1)
    lengths = [next(task.train_batches(4, g)).x.shape[1] for _ in range(20)]
    assert max(lengths) <= T and min(lengths) < T  # the first batch is not the bound
    assert task.eval_set("test").x.shape[1] <= task.max_steps("test", 4)


def test_the_estimate_grows_with_the_longest_sequence_not_the_first_batch():
    """Two ListOps tasks whose first batches are alike but whose bounds differ by 4x."""
    short, long = _cfg("mingru", 64, ["task.max_length=100"]), _cfg("mingru", 64, ["task.max_length=400"])
    a, b = (ens.member_bytes(c, build_task(c.task)) for c in (short, long))
    params = (
        4
        * ens.COPIES_PER_PARAMETER
        * sum(p.numel() for p in build_model(short.model, build_task(short.task)).parameters())
    )
    assert (b - params) / (a - params) == pytest.approx(399 / 99, rel=1e-9)


@pytest.mark.parametrize("cell", list(CELLS))
def test_member_bytes_covers_what_a_training_step_saves(cell):
    """A batched step of two members on a batch padded to the task's longest sequence: the
    bytes autograd saves for the backward pass, per member, and each member's weights,
    gradients and Adam's two moments, are at most the estimate, and the estimate at most 20
    times them (a bound from above, not a refusal of what would fit)."""
    torch.manual_seed(0)
    cfg = _cfg(cell, CELLS[cell])
    task = build_task(cfg.task)
    B, T = cfg.train.batch_size, task.max_steps("train", cfg.train.batch_size)
    model = build_model(cfg.model, task)
    models = [model, copy.deepcopy(model)]
    stacked = StackedModel(model)
    x = torch.randint(0, task.num_tokens, (2, B, T))
    lengths = torch.randint(T // 2, T + 1, (2, B))
    lengths[:, 0] = T
    y = torch.randint(0, task.output_size, (2, B))

    def step():
        out, _ = stacked.forward(models, x, None, lengths)
        loss = sum(torch.nn.functional.cross_entropy(out[k], y[k]) for k in range(2))
        loss.backward()

    saved = _saved_bytes(step) / 2
    weights = 4 * 4 * sum(p.numel() for p in model.parameters())
    measured = saved + weights
    need = ens.member_bytes(cfg, task)
    assert measured <= need <= 20 * measured, f"{cell}: estimate {need:,} against {measured:,.0f} measured"


def test_an_evaluation_chunk_is_sized_by_the_longest_sequence():
    """Before: by the first evaluation batch's length (the music tasks' shortest pieces, sorted)."""
    from rnnlab.stacked_model import EVAL_ELEMENTS, eval_chunk

    cfg = _cfg("mingru", 64, ["task.min_length=20", "task.max_length=3000", "task.max_depth=8"])
    task = build_task(cfg.task)
    model = build_model(cfg.model, task)
    first = next(iter(task.eval_batches("test", 4)))
    T = task.max_steps("test", 4)
    assert first.x.shape[1] < T == 2999
    assert eval_chunk(model, task, "test", 4) == EVAL_ELEMENTS // (4 * T * (64 + 10) * 4)


def test_too_many_members_for_the_longest_sequences_are_refused_in_one_line(monkeypatch):
    from rnnlab import device as dev

    cfg = _cfg("mingru", 64)
    task = build_task(cfg.task)
    need = ens.member_bytes(cfg, task)
    monkeypatch.setattr(dev, "available_memory", lambda d: ens.RESERVED_BYTES + int(2.5 * need))
    with pytest.raises(config.ConfigError, match=r"an ensemble of 3 members needs .* 2 members fit.*--seeds 0-1") as e:
        ens.check_members_fit(cfg, 3, task, torch.device("cpu"))
    assert "\n" not in str(e.value) and "longest sequences" in str(e.value)
    ens.check_members_fit(cfg, 2, task, torch.device("cpu"))
    monkeypatch.setattr(dev, "available_memory", lambda d: ens.RESERVED_BYTES + int(1.5 * need))
    with pytest.raises(config.ConfigError, match="not one member fits"):
        ens.check_members_fit(cfg, 1, task, torch.device("cpu"))  # a lone member runs beside a copy


PEAK = """
import json, resource, sys, tempfile
import torch
torch.set_num_threads(1)
from rnnlab import config
from rnnlab import ensemble as ens
from rnnlab.tasks import build_task
cfg = config.load("field/listops-lstm", json.loads(sys.argv[1]))
task = build_task(cfg.task)
for s in ("val", "test"):
    list(task.eval_batches(s, 64))
need = ens._ensemble_bytes(ens._needs(cfg, task), 3)  # what check_members_fit compares
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
with tempfile.TemporaryDirectory() as d:
    ens.train_ensemble(cfg, [0, 1, 2], d, progress=False, task=task)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"grown": peak - base, "need": need}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("cell,width", [("mingru", 128), ("s4d", 16), ("lstm", 128), ("ltrnn", 128)])
def test_three_members_grow_by_less_than_the_check_counts(cell, width):
    """The peak resident memory three members add (one training step and both evaluations, in a
    subprocess, ListOps of 300 to 999 tokens) is at most what the memory check counts for three
    members, and that at most 20 times it."""
    over = [
        "task.min_length=300",
        "task.max_length=1000",
        "task.val_size=16",
        "task.test_size=64",
        f'model.cell="{cell}"',
        f"model.hidden_size={width}",
        "train.steps=1",
        "train.eval_every=1",
        "train.batch_size=16",
        "train.eval_batch_size=64",
    ]
    from rnnlab import device as dev

    free = dev.available_memory(torch.device("cpu"))
    if free is not None and free < 6 * 2**30:
        pytest.skip(f"needs about 6 GiB free to measure three members, {free / 2**30:.1f} GiB available")
    env = {"PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", PEAK, json.dumps(over)], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["grown"] <= r["need"] <= 20 * r["grown"], r
