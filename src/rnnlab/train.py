"""The one training loop for every task and cell.

``train(cfg, run_dir)`` writes ``run_dir/``: ``config.json`` (resolved config),
``metrics.jsonl`` (one JSON object per logged step / evaluation), ``checkpoint.pt`` (written
atomically at every evaluation: model, optimizer, scheduler, RNG and carried state),
``best.pt`` (weights of the best validation score) and ``result.json``. ``resume=True``
continues from ``checkpoint.pt`` and reproduces the uninterrupted run exactly (the training
data stream is re-created from ``data_seed`` and fast-forwarded).
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import device as dev
from . import parametrize as par
from .config import ConfigError, OptimConfig, RunConfig, TaskConfig, from_dict, load_json
from .model import build_model
from .rundir import config_key
from .tasks import TASKS
from .tasks.base import Batch, Task


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class RunExists(RuntimeError):
    """The run directory already holds a checkpoint and ``resume`` was not asked for."""


class RunWriteError(RuntimeError):
    """A file of the run directory cannot be written (a full disk, a file-size limit, a path
    that is a file, a read-only directory); the message names the file and the fix."""


class CheckpointError(RuntimeError):
    """checkpoint.pt / best.pt is damaged, truncated, non-finite or from another run."""


def _write_fix(e: OSError) -> str:
    if e.errno in (errno.EFBIG, errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return ("the disk is full or a file-size limit was reached: free space (or choose another --out) "
                "and continue with `rnnlab train ... --resume`; the files written before are intact")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "the directory is not writable: choose another --out / --runs-dir or fix its permissions"
    if e.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        return "a part of the path is a file, not a directory: choose another --out / --runs-dir"
    return "check the run directory (--out / --runs-dir)"


def write_error(path: Path, e: OSError) -> RunWriteError:
    return RunWriteError(f"cannot write {path}: {e.strerror or e}; {_write_fix(e)}")


def _write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to ``path.tmp`` then rename over ``path``: a failed write leaves ``path`` as it was
    (and removes the partial ``.tmp``)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise write_error(path, e) from None


def atomic_save(obj, path: Path) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    _write_bytes_atomic(path, buf.getvalue())


def atomic_write_text(path: Path, text: str) -> None:
    _write_bytes_atomic(path, text.encode("utf-8"))


def all_finite(state_dict: dict) -> bool:
    """True when every floating-point (or complex) tensor of ``state_dict`` is finite."""
    return all(
        bool(torch.isfinite(v).all()) for v in state_dict.values()
        if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())
    )


_CKPT_KEYS = ("model", "optimizer", "rng", "progress")


def load_checkpoint(path: Path, *, full: bool, map_location="cpu") -> dict:
    """Read ``checkpoint.pt`` (``full=True``: the trainer's dict) or a weights file (best.pt:
    a state dict, or a checkpoint's ``"model"``); anything unreadable is a
    :class:`CheckpointError` naming the file and the fix."""
    fix = (f"delete {path.name} (the run then starts over without --resume) or restore it from a copy"
           if full else f"delete {path.name} or restore it from a copy; checkpoint.pt holds the last weights")
    try:
        obj = torch.load(path, weights_only=True, map_location=map_location)
    except FileNotFoundError:
        raise
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on damage
        why = (getattr(e, "strerror", None) or str(e) or type(e).__name__).splitlines()[0][:160]
        raise CheckpointError(f"{path} is damaged or truncated ({why}); {fix}") from None
    if full:
        missing = [k for k in _CKPT_KEYS if not isinstance(obj, dict) or k not in obj]
        if missing:
            raise CheckpointError(
                f"{path} is not a checkpoint written by `rnnlab train` (missing {missing}); {fix}"
            )
        weights = obj["model"]
    else:
        weights = obj["model"] if isinstance(obj, dict) and "model" in obj else obj
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise CheckpointError(f"{path} does not hold model weights (a state dict of tensors); {fix}")
    if not all_finite(weights):
        raise CheckpointError(f"{path} holds non-finite (NaN/inf) weights; {fix}")
    return obj


def load_weights(model: nn.Module, weights: dict, path: Path) -> None:
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        first = str(e).splitlines()[0] if str(e) else "mismatch"
        raise CheckpointError(
            f"{path} holds weights of another model ({first}...); it does not belong to this run's "
            f"config.json: delete it or move it back to its own run directory"
        ) from None


def higher_is_better(metric: str) -> bool:
    name = metric.split("/")[-1]
    return any(k in name for k in ("accuracy", "bleu"))


def build_task(cfg: TaskConfig, data_dir: str | None = None) -> Task:
    import inspect

    cls = TASKS[cfg.name]
    kwargs = dict(cfg.options)
    if data_dir is not None and "data_dir" in inspect.signature(cls.__init__).parameters:
        kwargs.setdefault("data_dir", data_dir)
    return cls(**kwargs)


def build_optimizer(cfg: OptimConfig, model: nn.Module) -> tuple[torch.optim.Optimizer, dict]:
    """One parameter group per tag of ``model.param_groups()``; ``group_lr`` and
    ``group_weight_decay`` override ``lr`` and ``weight_decay`` per tag. A tag the model
    scales (``model.group_scales()``, e.g. DMU's 1 / (2 n)) gets ``lr * scale`` and
    ``weight_decay * scale`` unless named explicitly."""
    tagged = model.param_groups() if hasattr(model, "param_groups") else {"default": list(model.parameters())}
    scales = model.group_scales() if hasattr(model, "group_scales") else {}
    groups, summary = [], {}
    for tag, params in tagged.items():
        if not params:
            continue
        scale = scales.get(tag, 1.0)
        lr = float(cfg.group_lr.get(tag, cfg.lr * scale))
        wd = float(cfg.group_weight_decay.get(tag, cfg.weight_decay * scale))
        groups.append({"params": params, "lr": lr, "weight_decay": wd, "tag": tag})
        summary[tag] = {"lr": lr, "weight_decay": wd, "elements": sum(p.numel() for p in params)}
    unused = sorted((set(cfg.group_lr) | set(cfg.group_weight_decay)) - set(summary))
    if unused:
        print(f"note: parameter group(s) {unused} named in [optim] do not exist in this model "
              f"(its groups: {sorted(summary)}); ignored", file=sys.stderr)
    if cfg.name == "rmsprop":
        opt = torch.optim.RMSprop(groups, lr=cfg.lr, alpha=cfg.alpha, eps=cfg.eps, momentum=cfg.momentum)
    elif cfg.name == "adam":
        opt = torch.optim.Adam(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    else:
        opt = torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return opt, summary


def _to(state, device):
    if state is None:
        return None
    return state.to(device) if isinstance(state, torch.Tensor) else tuple(s.to(device) for s in state)


def _detach(state):
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return state.detach()
    return type(state)(_detach(s) for s in state)  # tuple states; lists of per-layer states


def model_forward(model: nn.Module, batch: Batch, state=None):
    """Call a model on a batch: sequence models take (x, state, lengths); models that need more
    of the batch (encoder-decoders) define ``forward_batch``."""
    if hasattr(model, "forward_batch"):
        return model.forward_batch(batch, state)
    return model(batch.x, state, batch.lengths)


def to_device(batch: Batch, device: torch.device) -> Batch:
    """``batch`` on ``device`` (lengths stay on the CPU, where the layers read them); from
    pinned memory without blocking on CUDA."""
    if device.type == "cpu":
        return batch
    if device.type == "cuda":
        pin = lambda t: t.pin_memory() if isinstance(t, torch.Tensor) and t.device.type == "cpu" else t  # noqa: E731
        batch = Batch(pin(batch.x), pin(batch.y), batch.lengths, pin(batch.mask), batch.carry_state,
                      {k: pin(v) for k, v in batch.extra.items()})
        mv = lambda t: t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t  # noqa: E731
        return Batch(mv(batch.x), mv(batch.y), batch.lengths, mv(batch.mask), batch.carry_state,
                     {k: mv(v) for k, v in batch.extra.items()})
    return batch.to(device)


def _model_device(model: nn.Module) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, split: str, batch_size: int = 256, max_batches: int = 0,
             precision: str = "fp32") -> dict:
    """Metrics of ``model`` over the whole ``split`` (or its first ``max_batches`` batches),
    keyed ``"<split>/<metric>"``; batches go to the model's device, the forward pass runs
    under ``precision``'s autocast."""
    was_training = model.training
    model.eval()
    device = _model_device(model)
    sums: dict[str, list[float]] = {}
    carry = None
    try:
        for i, batch in enumerate(task.eval_batches(split, batch_size)):
            if max_batches and i >= max_batches:
                break
            batch = to_device(batch, device)
            with dev.autocast(device, precision):
                out, carry = model_forward(model, batch, carry if batch.carry_state else None)
            for k, (s, n) in task.metric_sums(out, batch).items():
                acc = sums.setdefault(k, [0.0, 0.0])
                acc[0] += s
                acc[1] += n
    finally:
        model.train(was_training)
    means = task.finalize({k: s / n for k, (s, n) in sums.items() if n > 0})
    if hasattr(task, "model_metrics"):  # metrics that need the model itself (translation BLEU)
        means.update(task.model_metrics(model, split, batch_size))
    return {f"{split}/{k}": float(v) for k, v in means.items()}


def versions() -> dict:
    import numpy

    from . import __version__

    return {
        "rnnlab": __version__, "torch": torch.__version__, "numpy": numpy.__version__,
        "python": platform.python_version(), "platform": platform.platform(),
    }


def git_state(path: str | Path | None = None) -> dict | None:
    """``{"commit": sha, "dirty": bool}`` of the git checkout holding ``path`` (default: this
    package's source), or None where there is no git or no checkout (an installed wheel)."""
    import subprocess

    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                             timeout=10)
        if sha.returncode != 0:
            return None
        st = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                            capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": sha.stdout.strip(), "dirty": bool(st.stdout.strip()) if st.returncode == 0 else None}


def source_hash() -> str:
    """sha256 (16 hex digits) of this package's Python sources and shipped presets, in path
    order: the code a run used, also where there is no git checkout (an installed wheel)."""
    import hashlib

    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml") and p.is_file()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _eval_line(name: str, step: int, steps: int, train_loss: float, metrics: dict, lr: float,
               s_per_step: float) -> str:
    parts = [f"{name} step {step}/{steps}", f"train/loss {train_loss:.4g}"]
    parts += [f"{k} {v:.4g}" for k, v in metrics.items()]
    parts += [f"lr {lr:.3g}", f"{s_per_step:.4f} s/step (training)"]
    return "  ".join(parts)


def _tensorboard_writer(run_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(
            "train.tensorboard = true needs the tensorboard package, which is not installed; "
            "install it with `pip install 'rnnlab[tensorboard]'` or set train.tensorboard = false"
        ) from None
    return SummaryWriter(log_dir=str(run_dir / "tensorboard"))


def runtime_conditions(threads: int, device: torch.device | None = None, precision: str = "fp32") -> dict:
    from .runtime import malloc_conditions

    return {"threads": threads, "malloc": malloc_conditions(),
            **dev.conditions(device or torch.device("cpu"), precision)}


@dataclass
class _Progress:
    step: int = 0
    best_value: float = float("nan")
    best_step: int = 0
    elapsed: float = 0.0
    eval_elapsed: float = 0.0  # of ``elapsed``: evaluation and checkpointing, not training
    stopped: str = ""


def _improved(value: float, best: float, higher: bool) -> bool:
    if not math.isfinite(value):
        return False  # a NaN/inf score is never "best" (best.pt only ever holds a finite one)
    if math.isnan(best):
        return True
    return value > best if higher else value < best


def _reached(value: float, target: float, higher: bool) -> bool:
    return value >= target if higher else value <= target


#: keys a resumed run may change: the length of the run, and where and in which precision it
#: computes (they do not change the experiment)
RESUME_MAY_CHANGE = (("train", "steps"), ("train", "device"), ("train", "precision"))


def _same_except_steps(a: dict, b: dict) -> list[str]:
    diffs = []
    for section in sorted(set(a) | set(b)):
        va, vb = a.get(section), b.get(section)
        if isinstance(va, dict) and isinstance(vb, dict):
            for k in sorted(set(va) | set(vb)):
                if (section, k) not in RESUME_MAY_CHANGE and va.get(k) != vb.get(k):
                    diffs.append(f"{section}.{k}: {va.get(k)!r} -> {vb.get(k)!r}")
        elif va != vb:
            diffs.append(f"{section}: {va!r} -> {vb!r}")
    return diffs


def train(
    cfg: RunConfig, run_dir: str | Path, resume: bool = False, progress: bool | None = None,
    data_dir: str | None = None, task: Task | None = None, on_eval=None,
) -> dict:
    """Train ``cfg`` into ``run_dir``; return the result dict (also written to result.json).

    ``on_eval(step, metrics) -> bool``, if given, is called after every evaluation with the
    validation metrics (before that step's checkpoint, which then records the stop); a true
    return value stops training there with ``result["stopped"] == "on_eval"`` (a sweep's pruner
    uses it). Evaluations from before a resumed run's checkpoint are not replayed.

    ``progress=None`` shows a progress bar only on a terminal. Raises ``TrainingDiverged`` on a
    NaN/inf loss (the last good checkpoint stays) and ``RunExists`` when ``run_dir`` already has
    a checkpoint and ``resume`` is False.
    """
    from .rundir import claim, discard_failed_start

    run_dir = Path(run_dir)
    for parent in (run_dir, *run_dir.parents):
        if parent.exists():
            if not parent.is_dir():
                raise RunWriteError(
                    f"cannot use {run_dir} as the run directory: {parent} is a file, not a directory; "
                    f"choose another --out / --runs-dir"
                )
            break
    dev.resolve(cfg.train.device, cfg.train.precision)  # a device this machine lacks: before anything is written
    with claim(run_dir):  # one writer per run directory; a failed start leaves no stub behind
        before = {p.name for p in run_dir.iterdir()}
        try:
            return _train(cfg, run_dir, resume, progress, data_dir, task, on_eval)
        except BaseException:
            discard_failed_start(run_dir, before)
            raise


def _train(cfg: RunConfig, run_dir: Path, resume: bool, progress: bool | None, data_dir: str | None,
           task: Task | None, on_eval=None) -> dict:
    from .rundir import read_jsonl

    ckpt_path, best_path = run_dir / "checkpoint.pt", run_dir / "best.pt"
    metrics_path, config_path = run_dir / "metrics.jsonl", run_dir / "config.json"
    device = dev.resolve_device(cfg.train.device)  # checked in train()
    precision = cfg.train.precision
    if resume:
        if not ckpt_path.exists():
            raise FileNotFoundError(
                f"cannot resume: {ckpt_path} does not exist (nothing was checkpointed yet); "
                f"start the run without --resume"
            )
        # re-resolved through today's dataclasses, so keys added since the run started compare
        # at their defaults instead of counting as a change
        saved = load_json(config_path).to_dict()
        diffs = _same_except_steps(saved, cfg.to_dict())
        if diffs:
            raise ConfigError(
                "cannot resume with a different configuration (only train.steps, train.device and "
                "train.precision may change): "
                + "; ".join(diffs)
            )
    elif ckpt_path.exists():
        raise RunExists(
            f"{run_dir} already holds a run (checkpoint.pt). Pass --resume to continue it, or "
            f"choose another directory (--out) / delete it."
        )
    tc = cfg.train
    writer = _tensorboard_writer(run_dir) if tc.tensorboard else None
    git = git_state()  # the code this run starts with (a checkout can move while it trains)
    source = source_hash()

    torch.set_num_threads(tc.threads)
    task = task or build_task(cfg.task, data_dir)
    # what rebuilding the model needs without the dataset (sizes, vocabularies): load_run reads it
    atomic_write_text(run_dir / "task.json", json.dumps(task.metadata(), indent=2) + "\n")
    torch.manual_seed(tc.seed)
    model = build_model(cfg.model, task).to(device)
    opt, groups = build_optimizer(cfg.optim, model)
    scaler = dev.grad_scaler(device, precision)
    higher_select = task.higher_is_better if not tc.select_metric else higher_is_better(tc.select_metric)
    select = tc.select_metric or f"val/{task.primary_metric}"
    sched = None
    if tc.schedule == "plateau":
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, mode="max" if higher_select else "min", factor=tc.plateau_factor,
            patience=tc.plateau_patience,
        )
    elif tc.schedule == "exponential":  # lr <- lr * lr_gamma every lr_step_every steps (an "epoch")
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=tc.lr_gamma)
    lr_every = tc.lr_step_every or tc.eval_every
    params = [p for g in opt.param_groups for p in g["params"]]

    prog = _Progress()
    carry = None
    if resume:
        # written on any device: tensors come back on this run's device (a GPU run resumes on
        # the CPU and the other way round)
        ck = load_checkpoint(ckpt_path, full=True, map_location=device)
        try:
            saved_cfg = from_dict(ck["config"]).to_dict() if isinstance(ck.get("config"), dict) else None
        except ConfigError:  # written by a version whose keys differ: config.json was checked above
            saved_cfg = None
        diffs = _same_except_steps(saved_cfg, cfg.to_dict()) if saved_cfg is not None else []
        if diffs:
            raise CheckpointError(
                f"{ckpt_path} belongs to another configuration than {config_path} ({'; '.join(diffs[:3])}); "
                f"put it back in its own run directory, or delete it to start this run over"
            )
        load_weights(model, ck["model"], ckpt_path)
        try:
            opt.load_state_dict(ck["optimizer"])  # moves the optimizer state to the parameters' device
            if sched is not None and ck.get("scheduler") is not None:
                sched.load_state_dict(ck["scheduler"])
            if scaler is not None and ck.get("scaler"):
                scaler.load_state_dict(ck["scaler"])
            torch.set_rng_state(ck["rng"].cpu())
            if device.type == "cuda" and ck.get("cuda_rng") is not None:
                torch.cuda.set_rng_state(ck["cuda_rng"].cpu(), device)
            prog = _Progress(**ck["progress"])
        except (ValueError, TypeError, KeyError, RuntimeError) as e:
            raise CheckpointError(
                f"{ckpt_path} holds an optimizer/RNG/progress state that does not fit this run "
                f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}); delete it "
                f"(the run then starts over without --resume) or restore it from a copy"
            ) from None
        carry = _to(ck.get("carry"), device)
        if prog.step > tc.steps:
            raise ConfigError(
                f"cannot resume {run_dir} with train.steps={tc.steps}: it has already trained "
                f"{prog.step} steps; resume with train.steps >= {prog.step}, or start a shorter run "
                f"in another directory"
            )
        keep = []
        if metrics_path.exists():
            # an interrupted write can leave a partial last line: drop it (and any garbage line)
            rows, bad = read_jsonl(metrics_path)
            if bad:
                print(f"note: {metrics_path}: dropped unreadable line(s) {bad} (an interrupted write)",
                      file=sys.stderr)
            keep = [json.dumps(r) for r in rows if r["step"] <= prog.step]
        if tc.steps != saved["train"]["steps"]:
            # the old result belongs to the old step budget: the run is unfinished until the new one
            (run_dir / "result.json").unlink(missing_ok=True)
        atomic_write_text(config_path, cfg.to_json() + "\n")
        atomic_write_text(metrics_path, "".join(ln + "\n" for ln in keep))
    else:
        atomic_write_text(config_path, cfg.to_json() + "\n")
        atomic_write_text(metrics_path, "")

    gen = torch.Generator().manual_seed(cfg.data_seed)
    stream = task.train_batches(tc.batch_size, gen)
    for _ in range(prog.step):  # fast-forward the data stream to where the checkpoint was taken
        next(stream)

    from tqdm.auto import tqdm

    bar = tqdm(total=tc.steps, initial=prog.step, disable=(None if progress is None else not progress),
               desc=cfg.name, dynamic_ncols=True, leave=False)
    try:
        log = metrics_path.open("a")
    except OSError as e:
        raise write_error(metrics_path, e) from None
    # off a terminal (batch jobs, CI), one line per evaluation instead of the progress bar
    lines = progress is None and not sys.stderr.isatty()
    last_eval: dict = {}
    t_start = time.perf_counter() - prog.elapsed
    window = {"start": time.perf_counter(), "step": prog.step, "loss": 0.0, "n": 0}
    stopped = prog.stopped
    # (step, selection metric) of the checkpoint on disk: only finite weights and metrics get there
    good = (prog.step, ck.get("select_value")) if resume else None

    def emit(row: dict) -> None:
        try:
            log.write(json.dumps(row) + "\n")
            log.flush()
        except OSError as e:
            raise write_error(metrics_path, e) from None

    def kept() -> str:
        if good is None:
            return "no good checkpoint exists (none was written before this point)"
        value = f", {select}={good[1]:.6g}" if isinstance(good[1], float) else ""
        return f"the last good checkpoint ({ckpt_path}, step {good[0]}{value}) is kept"

    def checkpoint(value: float):
        nonlocal good
        prog.elapsed = time.perf_counter() - t_start
        atomic_save({
            "model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict() if sched is not None else None,
            "rng": torch.get_rng_state(), "progress": vars(prog).copy(), "carry": carry,
            "config": cfg.to_dict(), "select_value": value, "device": str(device),
            "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "scaler": scaler.state_dict() if scaler is not None else None,
        }, ckpt_path)
        good = (prog.step, value)

    try:
        model.train()
        while prog.step < tc.steps and not stopped:
            batch = to_device(next(stream), device)
            state = carry if (batch.carry_state and carry is not None) else None
            with dev.autocast(device, precision):
                out, new_state = model_forward(model, batch, state)
                loss = task.loss(out, batch)
                reg = model.regularization() if hasattr(model, "regularization") else None
                total = loss if reg is None else loss + reg
            step = prog.step + 1
            if not torch.isfinite(total):
                emit({"step": step, "train/loss": loss.item()})
                raise TrainingDiverged(
                    f"{cfg.name}: the training loss became {total.item()} at step {step}; {kept()}. "
                    f"Lower optim.lr, set optim.clip (e.g. --set optim.clip=1.0) or check the data."
                )
            opt.zero_grad(set_to_none=True)
            if scaler is None:
                total.backward()
                gnorm = nn.utils.clip_grad_norm_(params, cfg.optim.clip) if cfg.optim.clip > 0 else None
                opt.step()
            else:  # fp16: scaled loss; gradients unscaled before clipping; overflowing steps skipped
                scaler.scale(total).backward()
                scaler.unscale_(opt)
                gnorm = nn.utils.clip_grad_norm_(params, cfg.optim.clip) if cfg.optim.clip > 0 else None
                scaler.step(opt)
                scaler.update()
            par.after_optimizer_step(model)
            carry = _detach(new_state)
            prog.step = step
            if tc.schedule == "exponential" and step % lr_every == 0:
                sched.step()
            bar.update(1)
            window["loss"] += loss.item()
            window["n"] += 1
            if step % tc.log_every == 0 or step == tc.steps:
                row = {"step": step, "time": round(time.perf_counter() - t_start, 3), "train/loss": loss.item()}
                if reg is not None:
                    row["train/reg"] = reg.item()
                if gnorm is not None:
                    row["train/grad_norm"] = float(gnorm)
                row["lr"] = opt.param_groups[0]["lr"]
                emit(row)
                if writer is not None:
                    for k, v in row.items():
                        if k not in ("step", "time"):
                            writer.add_scalar(k, v, step)
                bar.set_postfix(loss=f"{loss.item():.4g}")
            if step % tc.eval_every == 0 or step == tc.steps:
                t_eval = time.perf_counter()
                s_per_step = (t_eval - window["start"]) / max(step - window["step"], 1)
                last_eval = evaluate(model, task, "val", tc.eval_batch_size, tc.eval_max_batches, precision)
                value = last_eval.get(select, float("nan"))
                bad = "" if all_finite(model.state_dict()) else "the weights"
                if not bad and select in last_eval and not math.isfinite(value):
                    bad = f"the selection metric {select} (= {value})"
                if bad:
                    emit({"step": step, "time": round(time.perf_counter() - t_start, 3), **last_eval})
                    raise TrainingDiverged(
                        f"{cfg.name}: {bad} became non-finite at step {step} (nothing saved at "
                        f"this step); {kept()}. Lower optim.lr or set optim.clip (e.g. --set optim.clip=1.0)."
                    )
                if _improved(value, prog.best_value, higher_select):
                    prog.best_value, prog.best_step = value, step
                    atomic_save(model.state_dict(), best_path)
                if tc.schedule == "plateau":
                    sched.step(value)
                if tc.target_metric and tc.target_metric in last_eval:
                    if _reached(last_eval[tc.target_metric], tc.target_value, higher_is_better(tc.target_metric)):
                        stopped = prog.stopped = "target"
                # (the s/step of this window goes to the log line and TensorBoard, not to
                # metrics.jsonl, whose rows only "time" keeps machine-dependent)
                emit({"step": step, "time": round(time.perf_counter() - t_start, 3), **last_eval})
                if writer is not None:
                    for k, v in last_eval.items():
                        writer.add_scalar(k, v, step)
                    writer.add_scalar("time/train_s_per_step", s_per_step, step)
                    writer.flush()
                if lines:
                    lr = next((g["lr"] for g in opt.param_groups if g.get("tag") == "default"),
                              opt.param_groups[0]["lr"])
                    print(_eval_line(cfg.name, step, tc.steps, window["loss"] / max(window["n"], 1), last_eval,
                                     lr, s_per_step), file=sys.stderr, flush=True)
                if on_eval is not None and on_eval(step, dict(last_eval)) and not stopped and step < tc.steps:
                    stopped = prog.stopped = "on_eval"
                t_ck = time.perf_counter()
                prog.eval_elapsed += t_ck - t_eval
                checkpoint(value if math.isfinite(value) else None)
                now = time.perf_counter()
                prog.eval_elapsed += now - t_ck  # (this part is not in the checkpoint it times)
                window.update(start=now, step=step, loss=0.0, n=0)
    finally:
        bar.close()
        try:
            log.close()
        except OSError:  # a failed flush already raised the error that matters
            pass
        if writer is not None:
            writer.close()

    if not last_eval:  # resumed a run that had already finished
        last_eval = evaluate(model, task, "val", tc.eval_batch_size, tc.eval_max_batches, precision)
    result = {
        "name": cfg.name, "task": cfg.task.name, "cell": cfg.model.cell, "seed": tc.seed,
        "data_seed": cfg.data_seed, "steps": prog.step, "stopped": stopped or "completed",
        "final": last_eval, "best": {"step": prog.best_step, select: prog.best_value},
        "select_metric": select, "baseline": task.baseline(), "paper": cfg.paper,
        "params": model.parameter_counts() if hasattr(model, "parameter_counts")
        else {"elements": sum(p.numel() for p in model.parameters())},
        "param_groups": groups, "wall_time_s": round(time.perf_counter() - t_start, 2),
        "conditions": runtime_conditions(tc.threads, device, precision), "versions": versions(),
        "config_key": config_key(cfg), "git": git, "source_sha256": source,
    }
    # training alone: evaluation and checkpoint writing are timed apart (eval_time_s)
    result["eval_time_s"] = round(prog.eval_elapsed, 2)
    result["train_time_s"] = round(result["wall_time_s"] - prog.eval_elapsed, 2)
    result["time_per_step_s"] = round(result["train_time_s"] / max(prog.step, 1), 4)
    if tc.test:
        if best_path.exists():
            load_weights(model, load_checkpoint(best_path, full=False, map_location=device), best_path)
        result["test"] = evaluate(model, task, "test", tc.eval_batch_size, tc.eval_max_batches, precision)
    atomic_write_text(run_dir / "result.json", json.dumps(result, indent=2) + "\n")
    return result


def load_run(path: str | Path, which: str = "best", data_dir: str | None = None, device: str | None = "cpu",
             data: bool | None = None):
    """Load a trained run for inference or re-scoring: returns ``(cfg, task, model)``.

    ``path``: a run directory or a checkpoint file inside one. ``which``: ``"best"`` (best.pt,
    the best validation score) or ``"last"`` (checkpoint.pt). ``device``: where the model goes
    (``"cpu"`` by default, whatever device wrote the weights; ``"auto"``, ``"cuda"``, ... as
    ``train.device``). ``data``: None loads the task's data when it is
    available and otherwise rebuilds the task from the run's ``task.json`` (sizes, vocabularies:
    enough to run the model, no batches); True requires the data; False never reads it.
    Weights are read with ``torch.load(weights_only=True)``: no code in the file runs. The
    model is returned in eval mode.
    """
    from .tasks.base import TaskInfo
    from .tasks.data import DataError

    device = dev.resolve_device(device or "cpu")
    path = Path(path)
    run_dir = path if path.is_dir() else path.parent
    config_path, meta_path = run_dir / "config.json", run_dir / "task.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory: config.json is missing")
    if which not in ("best", "last"):
        raise ValueError(f"which must be 'best' or 'last', got {which!r}")
    cfg = load_json(config_path)
    task: Task | None = None
    if data is not False:
        try:
            task = build_task(cfg.task, data_dir)
        except (DataError, FileNotFoundError) as e:
            if data or not meta_path.exists():
                raise
            print(f"note: {e.__class__.__name__}: data of task {cfg.task.name!r} unavailable; "
                  f"model rebuilt from {meta_path}", file=sys.stderr)
    if task is None:
        if not meta_path.exists():
            raise FileNotFoundError(
                f"{meta_path} is missing (runs trained before rnnlab 0.2 lack it): load the run "
                f"with its data (data=None or True)")
        task = TaskInfo(json.loads(meta_path.read_text()))
    model = build_model(cfg.model, task)
    if path.is_file():
        ck_file = path
    else:
        ck_file = run_dir / ("best.pt" if which == "best" else "checkpoint.pt")
        if not ck_file.exists():
            ck_file = run_dir / "checkpoint.pt"
    if not ck_file.exists():
        raise FileNotFoundError(f"no weights in {run_dir}: neither best.pt nor checkpoint.pt exists")
    state = load_checkpoint(ck_file, full=False, map_location=device)
    model.to(device)
    load_weights(model, state["model"] if "model" in state else state, ck_file)
    model.eval()
    return cfg, task, model
