"""Run anywhere: devices, mixed precision, portable checkpoints.

Device tests are written once and parametrized over the devices present: the CPU always,
CUDA and MPS where this machine has them (skipped with a reason elsewhere). Two CPU-side
checks catch device mistakes without a GPU: every cell's fast path runs forward and backward
on the ``meta`` device (a buffer made on the CPU meets meta tensors and fails), and a
``TorchFunctionMode`` records any tensor factory called from rnnlab's code without a device.
"""

from __future__ import annotations

import copy
import inspect
import io
import json
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

import rnnlab
from conftest import set_flags, speed_spec, tiny_copy
from rnnlab import config
from rnnlab import device as dev
from rnnlab import train as tr
from rnnlab.cells import CELLS, Recurrent
from rnnlab.parametrize import orthogonality_error

HAS_MPS = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=pytest.mark.skipif(
            not torch.cuda.is_available(), reason="no CUDA GPU on this machine (torch.cuda.is_available() is False)"
        ),
    ),
    pytest.param("mps", id="mps", marks=pytest.mark.skipif(not HAS_MPS, reason="no Apple MPS device on this machine")),
]

#: cell options that make ``sequence`` take its fast path at these sizes
FAST = {"asrnn": {"backend": "fast"}}
#: (cell, options) whose lengths path is ATen's packed-sequence kernel: not ours, and it reads
#: the lengths' data, which the meta device has none of
NATIVE_LENGTHS = {"lstm", "gru", "asrnn", "momentumlstm"}


def _cli(capsys, *args):
    """``rnnlab ARGS`` in this process: (exit code, stderr)."""
    from rnnlab.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def _tiny_copy(tmp_steps=40, **train) -> config.RunConfig:
    data = {
        "name": "tiny-copy",
        "task": {"name": "copy", "K": 3, "L": 5, "alphabet": 4, "val_size": 64, "test_size": 64},
        "model": {"cell": "exprnn", "hidden_size": 24},
        "optim": {"name": "rmsprop", "lr": 3e-3, "alpha": 0.9, "group_lr": {"orthogonal": 3e-4}},
        "train": {"steps": tmp_steps, "batch_size": 32, "eval_every": 20, "log_every": 5, "seed": 3, **train},
    }
    return config.from_dict(data)


# --- every cell on every present device ---------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("key", sorted(CELLS))
def test_fast_path_equals_reference_on_device(device, key):
    """Forward and backward of each cell's fast path against its own reference loop, on the
    device (float64 where the device has it; MPS has no float64: float32 there)."""
    dtype = torch.float32 if device == "mps" else torch.float64
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    torch.manual_seed(0)
    fast = Recurrent(3, 6, cell=CELLS[key], **FAST.get(key, {})).to(device, dtype)
    ref = copy.deepcopy(fast)
    for c in ref.cells:
        c.backend = "reference"
    x = torch.randn(9, 2, 3, device=device, dtype=dtype)
    outs, grads = [], []
    for layer in (fast, ref):
        xi = x.clone().requires_grad_()
        out, h = layer(xi)
        assert out.device.type == device and out.dtype == dtype
        (out.pow(2).sum() + out[-1].sum()).backward()
        outs.append(out.detach())
        grads.append([xi.grad] + [p.grad for p in layer.parameters()])
    torch.testing.assert_close(outs[0], outs[1], atol=tol, rtol=tol)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_short_training_run_on_device(device, tmp_path):
    cfg = _tiny_copy(40, device=device)
    r = tr.train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(ln) for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [row["train/loss"] for row in rows if "train/loss" in row]
    assert losses[-1] < 0.8 * losses[0]
    cond = r["conditions"]
    assert cond["device"].startswith(device) and cond["precision"] == "fp32" and cond["device_name"]
    if device == "cuda":
        assert cond["cuda"] == torch.version.cuda and "cudnn" in cond


# --- device mistakes caught on the CPU ----------------------------------------------------


@pytest.mark.parametrize("lengths", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize("key", sorted(CELLS))
def test_fast_path_runs_on_meta(key, lengths):
    """A buffer created on the CPU (a factory call without ``device=``) meets the meta
    tensors of the input and weights and raises; so this catches device mistakes in every
    fast path, forward and backward, without a GPU."""
    if lengths and key in NATIVE_LENGTHS:
        pytest.skip(f"{key}'s lengths path is ATen's packed-sequence kernel, which reads the lengths' data")
    layer = Recurrent(5, 8, cell=CELLS[key], **FAST.get(key, {})).to("meta")
    x = torch.randn(7, 3, 5, device="meta", requires_grad=True)
    out, h = layer(x, lengths=torch.tensor([7, 3, 5]) if lengths else None)
    assert out.device.type == "meta" and out.shape == (7, 3, 8)
    h0 = h[0] if isinstance(h, tuple) else h
    (out.sum() + h0.sum()).backward()
    assert x.grad.device.type == "meta"
    assert all(p.grad is not None and p.grad.device.type == "meta" for p in layer.parameters() if p.requires_grad)


def test_checkpointed_chunks_run_on_meta():
    layer = Recurrent(5, 8, cell=CELLS["exprnn"], checkpoint_chunk=3).to("meta")
    x = torch.randn(10, 2, 5, device="meta", requires_grad=True)
    out, _ = layer(x, lengths=torch.tensor([10, 4]))
    out.sum().backward()
    assert x.grad.shape == x.shape


FACTORIES = {
    torch.zeros,
    torch.ones,
    torch.empty,
    torch.full,
    torch.arange,
    torch.eye,
    torch.tensor,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.linspace,
}


PACKAGE_DIR = Path(rnnlab.__file__).resolve().parent


def _is_package_source(filename: str) -> bool:
    """Whether ``filename`` is one of rnnlab's own source files: inside the installed package's
    folder, whatever the folder the checkout (or this test file) lives in is called."""
    try:
        return Path(filename).resolve().is_relative_to(PACKAGE_DIR)
    except (OSError, ValueError):
        return False


class FactoryAudit(TorchFunctionMode):
    """Records every tensor factory called from rnnlab's source without an explicit device."""

    def __init__(self):
        super().__init__()
        self.hits = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            caller = inspect.stack()[1]
            if _is_package_source(caller.filename):
                self.hits.append(f"{Path(caller.filename).name}:{caller.lineno} {func.__name__}")
        return func(*args, **kwargs)


@pytest.mark.parametrize("key", sorted(CELLS))
def test_fast_paths_make_no_tensor_without_a_device(key):
    torch.manual_seed(0)
    layer = Recurrent(5, 8, cell=CELLS[key], **FAST.get(key, {}))
    x = torch.randn(6, 3, 5, requires_grad=True)
    audit = FactoryAudit()
    with audit:
        for lengths in (None, torch.tensor([6, 2, 4])):
            out, _ = layer(x, lengths=lengths)
            out.pow(2).sum().backward()
    assert audit.hits == []


def test_factory_audit_catches_a_deviceless_buffer():
    """The audit itself can fail: a kernel that makes a buffer without a device is reported."""
    from rnnlab.kernels.families import rnn as recurrence

    audit = FactoryAudit()
    with audit:
        recurrence.reference_elementwise_rnn(torch.randn(3, 2, 4), torch.eye(4, device="cpu"))
        eval(compile("torch.zeros(2)", str(Path(recurrence.__file__)), "eval"), {"torch": torch})
    assert len(audit.hits) == 1 and "zeros" in audit.hits[0]


# --- precision ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "steps", [pytest.param(20, id="20-steps"), pytest.param(1000, id="1000-steps", marks=pytest.mark.slow)]
)
def test_orthogonal_weights_stay_orthogonal_after_bf16_steps(steps):
    """1000 (default suite: 20) RMSprop steps with the forward under bf16 autocast: the orthogonal maps (expm for
    asRNN's W_hh and U_f and nnRNN's P, Cayley for scoRNN) run in float32, so |W^T W - I|
    stays at float32 rounding (computed in bf16, as autocast would by itself for the
    products inside the maps, it is about 1e-2)."""
    torch.manual_seed(0)
    layers = {
        "scornn": Recurrent(3, 10, cell=CELLS["scornn"]),
        "asrnn": Recurrent(3, 10, cell=CELLS["asrnn"], a=0.5, b=1.5),
        "nnrnn": Recurrent(3, 10, cell=CELLS["nnrnn"]),
    }
    params = [p for m in layers.values() for p in m.parameters()]
    opt = torch.optim.RMSprop(params, lr=1e-2, alpha=0.9)
    x = torch.randn(2, 4, 3)
    target = torch.randn(2, 4, 10)
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = sum((m(x)[0] - target).pow(2).mean() for m in layers.values())
        opt.zero_grad()
        loss.backward()
        opt.step()
    cells = {k: m.cells[0] for k, m in layers.items()}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mats = {
            "scornn W_hh": cells["scornn"].weight_hh,
            "asrnn W_hh": cells["asrnn"].weight_hh,
            "asrnn U_f": cells["asrnn"].weight_uf,
            "nnrnn P": cells["nnrnn"].P,
        }
        V = cells["nnrnn"].recurrent_matrix()
        W_f_inv = cells["asrnn"].transformed_weights()[-1]
    assert V.dtype == W_f_inv.dtype == torch.float32
    for c in cells.values():  # the maps were exercised, not left at their initial points
        assert next(iter(c.parametrizations.values())).original.triu(1).abs().max() > 0.02
    for name, W in mats.items():
        assert W.dtype == torch.float32, name
        assert orthogonality_error(W.detach()) < 1e-5, name


def test_recurrences_run_in_float32_under_autocast():
    """The kernels take autocast's bf16 input projections and carry the state in float32."""
    from rnnlab.kernels import elementwise_rnn, reference_elementwise_rnn

    torch.manual_seed(0)
    u = torch.randn(50, 4, 8)
    W = torch.linalg.qr(torch.randn(8, 8))[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, h = elementwise_rnn(u.bfloat16(), W, activation="tanh")
    assert out.dtype == torch.float32
    ref, _ = reference_elementwise_rnn(u.bfloat16().float(), W, activation="tanh")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cli_trains_in_low_precision_like_fp32(precision, tmp_path, capsys):
    """``rnnlab train PRESET --device cpu --precision bf16`` (and fp16 with its gradient
    scaler) on a small copy task: the loss falls as fp32's does."""
    sets = set_flags(*tiny_copy(L=5, steps=40, eval_every=40))
    curves = {}
    for p in ("fp32", precision):
        code, err = _cli(
            capsys, "train", "demo/exprnn", "--device", "cpu", "--precision", p, "--out", tmp_path / p, "--quiet", *sets
        )
        assert code == 0, err
        rows = [json.loads(ln) for ln in (tmp_path / p / "metrics.jsonl").read_text().splitlines()]
        curves[p] = [row["train/loss"] for row in rows if "train/loss" in row]
        result = json.loads((tmp_path / p / "result.json").read_text())
        assert result["conditions"]["precision"] == p and result["conditions"]["device"] == "cpu"
    low, full = curves[precision], curves["fp32"]
    assert full[-1] < 0.85 * full[0] and low[-1] < 0.85 * low[0]  # both learn
    assert len(low) == len(full) and low != full  # autocast was on: not the fp32 run again
    for a, b in zip(low, full):  # and the low-precision curve follows fp32's within 3%
        assert abs(a - b) < 0.03 * b


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        pytest.param(
            ["--device", "cuda"],
            "no CUDA GPU found",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU"),
        ),
        pytest.param(
            ["--device", "mps"],
            "'mps' is not available",
            marks=pytest.mark.skipif(HAS_MPS, reason="this machine has MPS"),
        ),
        (["--device", "tpu"], "must be one of auto, cpu, cuda, cuda:N, mps"),
        (["--precision", "fp8"], "must be one of fp32, bf16, fp16"),
        (["--set", "train.precision=half"], "must be one of fp32, bf16, fp16"),
    ],
)
def test_bad_device_or_precision_is_one_line_before_anything_is_written(args, needle, tmp_path, capsys):
    code, err = _cli(capsys, "train", "demo/lstm", "--out", tmp_path / "run", *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rnnlab: error:") and needle in lines[0]
    if "--device" in args and "tpu" not in args:
        assert "devices found: cpu" in lines[0] and "choices: auto, cpu, cuda, cuda:N, mps" in lines[0]
    assert not (tmp_path / "run").exists()


def test_precision_that_cannot_run_is_refused():
    """fp16 where autocast cannot run (simulated with the meta device, which has no autocast)."""
    with pytest.raises(dev.DeviceError, match=r"train.precision='fp16' cannot run on meta.*fp32 runs everywhere"):
        dev.check_precision("fp16", torch.device("meta"))
    dev.check_precision("fp32", torch.device("meta"))  # fp32 needs nothing


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_bad_device_in_the_library_and_the_benchmark(capsys):
    with pytest.raises(dev.DeviceError, match="devices found: cpu"):
        dev.resolve("cuda:1")
    code, err = _cli(capsys, "bench", "speed", "--device", "cuda", "--configs", "copy", "--cells", "rnn")
    assert code == 2 and err.count("\n") == 1 and "--device='cuda' is not available" in err
    code, err = _cli(capsys, "analyze", "schur", "nowhere", "--device", "cuda")
    assert code == 2 and "no CUDA GPU found" in err


def test_auto_resolves_to_what_is_present():
    want = "cuda" if torch.cuda.is_available() else ("mps" if HAS_MPS else "cpu")
    assert dev.resolve_device("auto").type == want
    assert config.from_dict({}).train.device == "auto" and config.from_dict({}).train.precision == "fp32"


# --- portable runs ----------------------------------------------------------------------------


class gpu_tagged_saves:
    """While active, ``torch.save`` tags CPU tensors as living on ``cuda:0``: the file is what
    a GPU run writes (loading it without ``map_location`` needs a GPU)."""

    @staticmethod
    def _tag(obj):
        return "cuda:0" if obj.device.type == "cpu" else None

    def __enter__(self):
        torch.serialization.register_package(1, self._tag, lambda obj, loc: None)

    def __exit__(self, *exc):
        reg = torch.serialization._package_registry
        reg[:] = [e for e in reg if e[1] is not self._tag]


def _retag_as_gpu(path: Path) -> None:
    obj = torch.load(path, weights_only=False)
    with gpu_tagged_saves():
        torch.save(obj, path)


def test_gpu_tagged_file_needs_map_location():
    buf = io.BytesIO()
    with gpu_tagged_saves():
        torch.save({"w": torch.arange(3.0)}, buf)
    if not torch.cuda.is_available():
        buf.seek(0)
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(buf, weights_only=False)
    buf.seek(0)
    assert torch.equal(torch.load(buf, weights_only=False, map_location="cpu")["w"], torch.arange(3.0))


def test_gpu_checkpoint_resumes_on_cpu_exactly(tmp_path):
    """A run interrupted on a 'GPU' (its checkpoint tagged cuda:0) resumes on the CPU, with a
    changed train.device and train.precision accepted, and (fp32 again) ends exactly where the
    uninterrupted run ends."""
    # the run starts on "auto" (a real GPU where there is one) and resumes on the CPU in bf16
    tr.train(_tiny_copy(20, device="auto"), tmp_path / "part", progress=False)
    _retag_as_gpu(tmp_path / "part" / "checkpoint.pt")
    _retag_as_gpu(tmp_path / "part" / "best.pt")
    r_bf16 = tr.train(_tiny_copy(30, device="cpu", precision="bf16"), tmp_path / "part", resume=True, progress=False)
    assert r_bf16["steps"] == 30 and r_bf16["conditions"]["precision"] == "bf16"
    assert r_bf16["conditions"]["device"] == "cpu"
    # exactness: a GPU-tagged fp32 checkpoint resumed on the CPU ends where the whole run ends
    full = tr.train(_tiny_copy(40, device="cpu"), tmp_path / "full", progress=False)
    tr.train(_tiny_copy(20, device="cpu"), tmp_path / "exact", progress=False)
    _retag_as_gpu(tmp_path / "exact" / "checkpoint.pt")
    _retag_as_gpu(tmp_path / "exact" / "best.pt")
    r = tr.train(_tiny_copy(40, device="cpu"), tmp_path / "exact", resume=True, progress=False)
    assert r["final"] == full["final"] and r["test"] == full["test"]
    # other changes are still refused, and the message lists what may change
    with pytest.raises(config.ConfigError, match="train.steps, train.device and train.precision may change"):
        tr.train(_tiny_copy(40, device="cpu", batch_size=16), tmp_path / "exact", resume=True, progress=False)


def test_load_run_and_analyze_take_a_device(tmp_path, capsys):
    tr.train(_tiny_copy(20, device="cpu"), tmp_path / "run", progress=False)
    _retag_as_gpu(tmp_path / "run" / "best.pt")
    _retag_as_gpu(tmp_path / "run" / "checkpoint.pt")
    ref = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False, map_location="cpu")["model"]
    cfg, task, model = tr.load_run(tmp_path / "run", which="last", device="cpu")
    got = model.state_dict()
    assert all(torch.equal(got[k], v) for k, v in ref.items())
    assert all(p.device.type == "cpu" for p in model.parameters())
    code, err = _cli(capsys, "analyze", "schur", tmp_path / "run", "--device", "cpu", "--out", tmp_path / "schur")
    assert code == 0, err
    assert (tmp_path / "schur" / "schur.json").exists()


# --- the GPU benchmark's plumbing (runs on the CPU here) ------------------------------------------


def test_speed_worker_on_a_device_and_the_gpu_table():
    from rnnlab.bench import speed

    spec = speed_spec(T=6, batch=3, baseline_hidden=4, reference=True, device="cpu")
    res = speed._worker(spec)
    assert res["device"] == "cpu" and res["floor"] is not None
    # the same row as a GPU row would come back: wall-time ratios to the cuDNN LSTM
    row = {
        "config": "copy",
        "label": "exprnn",
        "hidden": 8,
        "params": 1,
        **res,
        "device": "cuda:0",
        "peak_gpu_mb": 12.5,
    }
    table = speed.format_table({"rows": [row]})
    assert "vs cuDNN LSTM" in table and "peak GPU MB" in table
    cells = [c.strip() for c in table.splitlines()[2].split("|")[1:-1]]
    for cell, other in ((cells[5], "baseline"), (cells[6], "reference")):  # median [min-max] of the repeats
        per_repeat = [f / o for f, o in zip(res["fast"]["wall_all"], res[other]["wall_all"])]
        assert float(cell.split(" [")[0]) == pytest.approx(
            sorted(per_repeat)[0] / 2 + sorted(per_repeat)[1] / 2, abs=0.006
        )
    assert cells[8] == "12"  # 12.5 MB rounds to even


@pytest.mark.parametrize("key", sorted(CELLS))
def test_every_cell_runs_under_cpu_bf16_autocast(key):
    """Forward and backward of each cell's default path under CPU bf16 autocast (before this
    rule ATen's LSTM failed in oneDNN, and the GRU, DMU, RHN and asRNN kernels met mixed
    dtypes): the result stays close to the float32 run, since only the input projection is
    rounded to bf16."""
    torch.manual_seed(0)
    layer = Recurrent(5, 8, cell=CELLS[key])
    x = torch.randn(12, 3, 5)
    ref, _ = layer(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = layer(x)
        loss = out.float().pow(2).sum()
    loss.backward()
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters() if p.grad is not None)
    torch.testing.assert_close(out, ref, atol=0.05, rtol=0.05)
