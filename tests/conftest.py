"""Shared test fixtures and helpers (test modules import the helpers: ``from conftest import ...``).

Real dataset files: the tests that read them are marked ``needs_data`` and take the
``data_root`` fixture; the folder is ``$RNNLAB_TEST_DATA`` (laid out as ``rnnlab data`` lays out
its root: ``mnist/``, ``ptb/``, ...). Without it they skip with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import pytest

#: the real dataset copy the data tests read, or None
DATA_ROOT = Path(os.environ["RNNLAB_TEST_DATA"]) if os.environ.get("RNNLAB_TEST_DATA") else None
NO_DATA = f"no real dataset copy at {DATA_ROOT}" if DATA_ROOT else "no real dataset copy (set RNNLAB_TEST_DATA)"


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_data: reads the real dataset files ($RNNLAB_TEST_DATA); skips without")


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_data") and (DATA_ROOT is None or not DATA_ROOT.is_dir()):
        pytest.skip(NO_DATA)


@pytest.fixture(autouse=True)
def _subnormals_as_the_cpu_has_them():
    """Every test starts with subnormal floats kept (the CPU's default): the CLI's entry point and
    the speed worker, called in-process by some tests, flush them for the rest of the process
    (rnnlab.runtime.flush_denormals), which must not leak into the tests after them."""
    yield
    import torch

    from rnnlab import runtime

    torch.set_flush_denormal(False)
    runtime._state["denormals"] = None


@pytest.fixture
def float64_default():
    """torch's default dtype float64 for one test (the one-hot encoder and the token stand-in
    write the default dtype, so the models are built in it)."""
    import torch

    was = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(was)


@pytest.fixture
def gathers(monkeypatch):
    """How many times a first layer gathered its weight's columns for token inputs
    (``rnnlab.kernels.ensemble._token_rows``)."""
    from rnnlab.kernels import ensemble as K

    calls = [0]
    real = K._token_rows

    def spy(*args):
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(K, "_token_rows", spy)
    return calls


@pytest.fixture
def data_root() -> Path:
    """The real dataset folder (the test skips when there is none)."""
    if DATA_ROOT is None or not DATA_ROOT.is_dir():
        pytest.skip(NO_DATA)
    return DATA_ROOT


@pytest.fixture
def one_thread():
    """torch on one thread for the test: small element-wise steps and FFTs only lose to thread
    start-up on a shared machine (``pytestmark = pytest.mark.usefixtures("one_thread")``)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


#: English-Spanish sentence pairs for a tiny Tatoeba-style translation file
SPANISH_PAIRS = [
    ("Go.", "Ve."),
    ("Hi.", "Hola."),
    ("Run!", "¡Corre!"),
    ("I see.", "Ya veo."),
    ("Tom ran.", "Tom corrió."),
    ("I won.", "Gané."),
    ("Help!", "¡Ayuda!"),
    ("Tom won.", "Tom ganó."),
]


def torch_twins():
    """(rnnlab cell key, its torch.nn layer class, keyword options): the layers that must equal
    torch.nn's given the same weights (``pytest.mark.parametrize("ours,theirs,kw", torch_twins())``)."""
    import torch

    return [
        ("lstm", torch.nn.LSTM, {}),
        ("gru", torch.nn.GRU, {}),
        ("rnn", torch.nn.RNN, {"nonlinearity": "tanh"}),
        ("rnn", torch.nn.RNN, {"nonlinearity": "relu"}),
    ]


def copy_weights_from_torch(layer, ref) -> None:
    """Copy a torch.nn RNN/LSTM/GRU's weights into an rnnlab layer by hand (layer l, direction d
    is cell 2l+d when bidirectional, else cell l): independent of rnnlab's own converters."""
    import torch

    dirs = ("", "_reverse") if ref.bidirectional else ("",)
    with torch.no_grad():
        for l in range(ref.num_layers):
            for d, suffix in enumerate(dirs):
                cell = layer.cells[len(dirs) * l + d]
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(cell, name).copy_(getattr(ref, f"{name}_l{l}{suffix}"))


def set_flags(*pairs: str) -> list[str]:
    """The command line's ``--set KEY=VALUE`` for each pair, in order: a tiny run's overrides,
    e.g. ``set_flags("train.steps=2", "task.L=12")``."""
    return [arg for pair in pairs for arg in ("--set", pair)]


@pytest.fixture
def mycells(tmp_path, monkeypatch):
    """The module ``mycells`` (tests/owncell.py: a cell of one's own and broken ones) in a folder
    outside the package, on sys.path; forgotten before and after."""
    from owncell import forget, write_cells

    folder = tmp_path / "userpkg"
    write_cells(folder)
    monkeypatch.syspath_prepend(str(folder))
    forget()
    yield folder
    forget()


def run_record(d: Path) -> dict:
    """What of a finished run directory must not depend on interruptions, resumption or being an
    ensemble's member: the result (final, test, best, steps), the metrics rows without their wall
    time, the weights. Asserts on the way that every step logged its training loss once (the runs
    log every step) and that config.json's steps agree with result.json's."""
    import torch

    res = json.loads((d / "result.json").read_text())
    rows = [
        {k: v for k, v in json.loads(ln).items() if k != "time"}
        for ln in (d / "metrics.jsonl").read_text().splitlines()
    ]
    steps = [r["step"] for r in rows if "train/loss" in r]
    assert steps == list(range(1, res["steps"] + 1)), f"{d}: a step missing or logged twice"
    assert json.loads((d / "config.json").read_text())["train"]["steps"] == res["steps"], f"{d}: config.json"
    w = torch.load(d / "checkpoint.pt", weights_only=False)["model"]
    return {
        "final": res["final"],
        "test": res["test"],
        "best": res["best"],
        "steps": res["steps"],
        "rows": rows,
        "weights": {k: v.tolist() for k, v in w.items()},
    }


def tiny_copy(
    *extra: str,
    steps: int | None = None,
    L: int | None = 8,
    K: int | None = 3,
    eval_size: int | None = 64,
    hidden: int | None = 24,
    batch: int | None = 32,
    eval_every: int | None = 5,
    log_every: int | None = 5,
) -> list[str]:
    """``KEY=VALUE`` overrides that make a copy-task preset (``demo/lstm``, ...) a run of seconds:
    the sequence (``task.L``, ``task.K``), the validation and test sets' size, the hidden size, the
    batch, how often it evaluates and logs, the steps; then ``extra``. A size of None keeps the
    preset's own. ``set_flags(*tiny_copy(...))`` makes them command-line flags."""
    sizes = {
        "task.L": L,
        "task.K": K,
        "task.val_size": eval_size,
        "task.test_size": eval_size,
        "model.hidden_size": hidden,
        "train.batch_size": batch,
        "train.eval_every": eval_every,
        "train.log_every": log_every,
        "train.steps": steps,
    }
    return [f"{k}={v}" for k, v in sizes.items() if v is not None] + list(extra)


def tiny_job(*extra: str, steps: int = 10, eval_every: int = 5) -> list[str]:
    """``tiny_copy`` at the sizes of the backends' and the sweeps' jobs (a narrower model, ``L=10``,
    the preset's own ``K``, no training log): the runs the pools, Ray and Optuna launch."""
    return tiny_copy(*extra, K=None, L=10, hidden=8, batch=16, log_every=None, eval_every=eval_every, steps=steps)


def speed_spec(config: str = "copy", *, T: int, batch: int, key: str = "exprnn", **fields) -> dict:
    """A speed benchmark worker's spec (``rnnlab.bench.speed._worker``) for ``key`` on a
    configuration cut to ``T`` steps of ``batch`` sequences: hidden 8, one warm-up and two timed
    repeats on one thread, no baseline or reference; ``fields`` override any of it."""
    import dataclasses

    from rnnlab.bench import speed

    cfg = dataclasses.replace(speed.CONFIGS[config], T=T, batch=batch)
    spec = {
        "config": dataclasses.asdict(cfg),
        "label": key,
        "key": key,
        "options": {},
        "hidden": 8,
        "gates": 1,
        "baseline_hidden": None,
        "reference": False,
        "warmup": 1,
        "repeats": 2,
        "threads": 1,
        "malloc": "default",
    }
    return {**spec, **fields}


def walk_parsers(parser, path=("rnnlab",)):
    """Every (command path, parser) pair of an argparse tree."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk_parsers(sub, path + (name,))


def write_record(
    root: Path,
    preset: str,
    seed: int,
    test: dict,
    overrides=(),
    steps=None,
    metrics=None,
    wall=10.0,
    result_extra=None,
    dirname=None,
) -> Path:
    """A finished run's directory as the trainer writes it (config.json, result.json,
    metrics.jsonl) for ledger tests, without training."""
    from rnnlab import config

    cfg = config.load(preset, [*overrides, f"train.seed={seed}"])
    d = root / cfg.name / (dirname or f"seed{seed}")
    d.mkdir(parents=True)
    (d / "config.json").write_text(cfg.to_json())
    result = {
        "name": cfg.name,
        "task": cfg.task.name,
        "cell": cfg.model.cell,
        "seed": seed,
        "steps": steps or cfg.train.steps,
        "final": {},
        "test": test,
        "baseline": {"loss": 0.04},
        "params": {"elements": 108},
        "wall_time_s": wall,
        "conditions": {"threads": 1},
        **(result_extra or {}),
    }
    (d / "result.json").write_text(json.dumps(result))
    rows = metrics if metrics is not None else [{"step": steps or cfg.train.steps, "val/loss": 1.0}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in rows))
    return d


# --------------------------------------------------------------------------- child processes


def wait_until(pred, timeout: float = 120.0, poll: float = 0.005) -> bool:
    """Whether ``pred()`` became true within ``timeout`` seconds (checked every ``poll``)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(poll)
    return False


def child_pids(pid: int) -> set[int]:
    """The children of process ``pid`` (Linux: ``/proc``)."""
    kids = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids |= {int(x) for x in (task / "children").read_text().split()}
    return kids


def process_gone(pid: int) -> bool:
    """Exited, every thread of it: the leader of a killed multi-threaded process reads as a zombie
    while its other threads are still exiting (and still hold its files, and so its locks)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return True
    for task in tasks:
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            return False
    return True


def kill_driver_and_check_its_workers_die(driver, what: str = "workers") -> None:
    """SIGKILL ``driver`` (a ``Popen`` with at least two worker children) and assert that every
    worker exits within 5 s; a survivor is killed afterwards, so the test leaves no orphan."""
    workers = child_pids(driver.pid)
    assert len(workers) >= 2, f"expected two {what}, found {workers}"
    driver.kill()
    driver.wait()
    try:
        assert wait_until(lambda: all(process_gone(w) for w in workers), timeout=5, poll=0.05), (
            f"orphaned {what} still running: {[w for w in workers if not process_gone(w)]}"
        )
    finally:
        for w in workers:
            if not process_gone(w):
                os.kill(w, signal.SIGKILL)


def default_sigint() -> None:
    """``preexec_fn`` of a child that must see our SIGINT: an ignored SIGINT is inherited through
    exec, and an in-process Ray session of an earlier test leaves it ignored in this process."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def flat_config(d: dict, prefix: str = "") -> dict:
    """A resolved configuration's dotted keys as the presets and ``--set`` spell them
    (``task.options.L`` is ``task.L``)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat_config(v, "task." if key == "task.options" else f"{key}."))
        else:
            out[key] = v
    return out


def preset_diff_keys(a: str, b: str) -> set[str]:
    """The keys of the experiment where presets ``a`` and ``b`` differ, as the ledger sees them."""
    from rnnlab import config
    from rnnlab.ledger import records

    ra, rb = (records._resolved(config.load(p).to_dict()) for p in (a, b))
    return {d.split(" ")[0] for d in records._diffs(ra, rb)}


def judge(text_part: str, root: Path) -> str:
    """The verdict the ledger gives the claim part ``text_part`` on the records below ``root``."""
    from rnnlab.ledger import claims, records

    ev = records.Evidence(*records.load_records([root]))
    for c in claims.CLAIMS:
        for part, verdict, _ in c.judge(ev):
            if part == text_part:
                return verdict
    raise KeyError(text_part)


def rk4(f, y0, t_end: float, n: int):
    """``y(t_end)`` of ``y' = f(y)`` from ``y0`` by ``n`` classical Runge-Kutta steps: the
    tests' independent solution of a cell's ODE."""
    h, y = t_end / n, y0
    for _ in range(n):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y
