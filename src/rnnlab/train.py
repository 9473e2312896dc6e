"""The one training loop for every task and cell.

``train(cfg, run_dir)`` writes a run directory (its files: :class:`rnnlab.rundir.RunFiles`):
``config.json``, ``task.json``, ``metrics.jsonl``, ``checkpoint.pt`` (written atomically at
every evaluation, and every ``train.checkpoint_every`` steps between them: model, optimizer,
scheduler, RNG and carried state), ``best.pt`` and, last,
``result.json``. ``resume=True`` continues from ``checkpoint.pt`` and reproduces the
uninterrupted run exactly (the training data stream is re-created from ``data_seed`` and
fast-forwarded).

The loop is :class:`Group`, whose unit is a group of members, each the run of one directory:
a single run is a group of one, an ensemble (:class:`rnnlab.ensemble.Ensemble`) a group whose
forward passes and evaluations run batched. :class:`RunState` is one run directory being
written (its progress, best score, log file, last good checkpoint, timing); :class:`Trainer`
is what trains one model (task, model, optimizer, scheduler, data stream, carried state). The
group takes the named steps for every member:

    check_start -> prepare -> [Group.step -> (Group.evaluate | checkpoint_between)]* -> finish
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import torch

from . import device as dev
from ._compat import moved_attribute
from .config import (
    NOT_EXPERIMENT,
    ConfigError,
    RunConfig,
    did_you_mean,
    from_dict,
    load_json,
    resume_may_change,
    resume_refusals,
)
from .evaluation import evaluate, model_forward, to_device
from .kernels.state import map_state
from .model import Model, build_model
from .rundir import (
    CheckpointError,
    RunExists,
    RunFiles,
    RunWriteError,
    all_finite,
    atomic_save,
    atomic_write_text,
    claim,
    config_key,
    discard_failed_start,
    git_state,
    is_finished,
    load_checkpoint,
    load_run,
    load_weights,
    read_jsonl,
    runtime_conditions,
    source_hash,
    versions,
    write_error,
)
from .runtime import PROGRESS_EVERY_S, caller_state_kept, show_progress
from .stepper import Stepper
from .tasks import build_task
from .tasks.base import Batch, Task, train_stream

log = logging.getLogger(__name__)

#: public names that moved out of this module (importable from here with a DeprecationWarning)
MOVED = {
    "build_optimizer": "rnnlab.stepper",
    "add_metric_sums": "rnnlab.evaluation",
    "eval_data": "rnnlab.evaluation",
    "split_metrics": "rnnlab.evaluation",
}


def __getattr__(name: str):
    return moved_attribute(__name__, MOVED, name)


# re-exported: public names that live in the run-directory module (rnnlab.train.load_run in docs)
__all__ = [
    "CheckpointError",
    "Group",
    "Member",
    "RunExists",
    "RunState",
    "RunWriteError",
    "Trainer",
    "TrainingDiverged",
    "build_task",
    "evaluate",
    "git_state",
    "higher_is_better",
    "load_run",
    "model_forward",
    "source_hash",
    "train",
    "versions",
]


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def higher_is_better(metric: str) -> bool:
    name = metric.split("/")[-1]
    return any(k in name for k in ("accuracy", "bleu"))


def _to(state, device):
    return None if state is None else map_state(lambda t: t.to(device), state)


def _detach(state):
    return None if state is None else map_state(torch.Tensor.detach, state)


def _eval_line(name: str, step: int, steps: int, train_loss: float, metrics: dict, lr: float, s_per_step: float) -> str:
    parts = [f"{name} step {step}/{steps}", f"train/loss {train_loss:.4g}"]
    parts += [f"{k} {v:.4g}" for k, v in metrics.items()]
    parts += [f"lr {lr:.3g}", f"{s_per_step:.4f} s/step (training)"]
    return "  ".join(parts)


def _tensorboard_class():
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(
            "train.tensorboard = true needs the tensorboard package, which is not installed; "
            "install it with `pip install 'rnnlab[tensorboard]'` or set train.tensorboard = false"
        ) from None
    return SummaryWriter


def _improved(value: float, best: float, higher: bool) -> bool:
    if not math.isfinite(value):
        return False  # a NaN/inf score is never "best" (best.pt only ever holds a finite one)
    if math.isnan(best):
        return True
    return value > best if higher else value < best


def _reached(value: float, target: float, higher: bool) -> bool:
    return value >= target if higher else value <= target


@dataclass
class Progress:
    """Where a run stands; saved in every checkpoint and restored on resume."""

    step: int = 0
    best_value: float = float("nan")
    best_step: int = 0
    elapsed: float = 0.0
    eval_elapsed: float = 0.0  # of ``elapsed``: evaluation and checkpointing, not training
    stopped: str = ""
    target_streak: int = 0  # evaluations in a row at the target (train.target_patience)
    # [[first step, precision], ...]: more than one entry is a mixed-precision run
    precision_segments: list = field(default_factory=list)


@dataclass
class RunState:
    """One run directory being trained: what the steps share about it."""

    cfg: RunConfig
    files: RunFiles
    select: str  # the validation metric that selects best.pt ("val/<metric>")
    higher_select: bool
    prog: Progress = field(default_factory=Progress)
    log: IO | None = None  # metrics.jsonl, open for appending
    writer: object = None  # a TensorBoard SummaryWriter, or None
    good: tuple | None = None  # (step, selection value) of the checkpoint on disk
    lines: bool = False  # print evaluation and progress lines (off a terminal)
    t_start: float = 0.0
    last_line: float = 0.0
    window: dict = field(default_factory=dict)  # training time and loss since the last evaluation
    last_eval: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)  # git and source hash at the start


@dataclass
class Trainer:
    """What trains one model: the task, the model and its optimizer, the data stream."""

    task: Task
    model: Model
    stepper: Stepper  # the optimizer, its groups, the fp16 scaler: the update step (rnnlab.stepper)
    sched: object
    device: torch.device
    precision: str
    lr_every: int
    carry: object = None
    stream: object = None

    @property
    def opt(self) -> torch.optim.Optimizer:
        return self.stepper.optimizer

    @property
    def scaler(self):
        return self.stepper.scaler

    @property
    def groups(self) -> dict:
        """The optimizer's parameter groups, summarised for result.json."""
        return self.stepper.groups

    @property
    def params(self) -> list:
        return self.stepper.params


@dataclass
class StepOut:
    """What one training step hands to logging."""

    loss: float
    reg: float | None
    grad_norm: float | None


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    resume: bool | str = False,
    progress: bool | None = None,
    data_dir: str | None = None,
    task: Task | None = None,
    on_eval=None,
    device: torch.device | None = None,
) -> dict:
    """Train ``cfg`` into ``run_dir``; return the result dict (also written to result.json).

    ``on_eval(step, metrics) -> bool``, if given, is called after every evaluation with the
    validation metrics (before that step's checkpoint, which then records the stop); a true
    return value stops training there with ``result["stopped"] == "on_eval"`` (a sweep's pruner
    uses it). Evaluations from before a resumed run's checkpoint are not replayed.

    ``device``: ``cfg.train.device`` as a caller has already resolved it (``device.resolve``;
    the CLI does, to report a device this machine lacks before it prints anything); by default
    it is resolved here. ``progress=None`` shows a progress bar only on a terminal. Raises ``TrainingDiverged`` on a
    NaN/inf loss (the last good checkpoint stays) and ``RunExists`` when ``run_dir`` already has
    a checkpoint and ``resume`` is False. ``resume="auto"`` continues a checkpointed run, starts
    one never checkpointed and returns a finished one's saved result (``start_mode``).

    >>> from rnnlab import config
    >>> cfg = config.load("demo/lstm", ["train.steps=2", "train.eval_every=2", "task.L=4",
    ...                                 "task.val_size=8", "task.test_size=8"])
    >>> result = train(cfg, "example-run", progress=False)
    >>> result["steps"], sorted(result["final"])[:2]
    (2, ['val/accuracy', 'val/loss'])
    """
    run_dir = Path(run_dir)
    check_run_dir(run_dir)
    # the device, resolved once for the run: one this machine lacks fails before anything is written
    if device is None:
        device = dev.resolve(cfg.train.device, cfg.train.precision)
    # one writer per run directory; a failed start leaves no stub behind; the caller's torch
    # thread count and random state are back afterwards (the run sets train.threads and seeds)
    with claim(run_dir), caller_state_kept():
        before = {p.name for p in run_dir.iterdir()}
        try:
            mode = start_mode(RunFiles(run_dir), cfg, resume)
            if isinstance(mode, dict):  # resume="auto" and the run is finished
                return mode
            return _train(cfg, RunFiles(run_dir), mode, progress, data_dir, task, on_eval, device)
        except BaseException:
            discard_failed_start(run_dir, before)
            raise


def check_run_dir(run_dir: Path) -> None:
    """``run_dir`` can be a run directory: it is one, or it can be made (no file in its way)."""
    for parent in (run_dir, *run_dir.parents):
        if parent.exists():
            if not parent.is_dir():
                raise RunWriteError(
                    f"cannot use {run_dir} as the run directory: {parent} is a file, not a directory; "
                    f"choose another --out / --runs-dir"
                )
            break


def _train(
    cfg: RunConfig,
    files: RunFiles,
    resume: bool,
    progress: bool | None,
    data_dir: str | None,
    task: Task | None,
    on_eval,
    device: torch.device,
) -> dict:
    """One run: a :class:`Group` of one member."""
    check_start(files, cfg, resume)
    run, tr = prepare(cfg, files, resume, data_dir, task, device)
    member = Member(cfg.train.seed, cfg, files.root, "training", resume=resume, run=run, tr=tr)
    try:
        open_log(run, progress)
    except BaseException:
        close_run(run)
        raise
    Group([member], tr.task, device, on_eval).run(progress)
    if member.result is None:  # (a failure raised already)
        raise RuntimeError(f"{files.root}: the run ended without a result ({member.error or member.status})")
    return member.result


# ---------------------------------------------------------------------------- prepare or resume


def start_mode(files: RunFiles, cfg: RunConfig, resume) -> bool | dict:
    """How a run starts. ``resume`` True or False is taken as given; ``"auto"`` (several seeds,
    each where it stands) gives the saved result of a finished run of this configuration (a
    dict: nothing to do), True when a checkpoint exists and False for a run never checkpointed.
    A finished run of another configuration in the directory is refused."""
    if resume != "auto":
        return bool(resume)
    if files.has(files.RESULT):
        if is_finished(files.root, cfg):
            return files.read_result()
        raise RunExists(
            f"{files.root} holds a finished run of another configuration (config.json); "
            f"move it away or use another --runs-dir"
        )
    return files.checkpoint.exists()


def check_start(files: RunFiles, cfg: RunConfig, resume: bool) -> None:
    """Before anything is built or written: a resume needs its checkpoint, its metrics and the
    same experiment (``config.resume_refusals``); a fresh start needs an unused directory."""
    if not resume:
        if files.checkpoint.exists():
            raise RunExists(
                f"{files.root} already holds a run (checkpoint.pt). Pass --resume to continue it, or "
                f"choose another directory (--out) / delete it."
            )
        return
    if not files.checkpoint.exists():
        raise FileNotFoundError(
            f"cannot resume: {files.checkpoint} does not exist (nothing was checkpointed yet); "
            f"start the run without --resume"
        )
    if not files.config.exists():
        raise FileNotFoundError(
            f"cannot resume {files.root}: config.json (the run's resolved configuration) is missing; "
            f"restore it from a copy, or start the run over (delete checkpoint.pt, or train into another --out)"
        )
    # re-resolved through today's dataclasses, so keys added since the run started compare
    # at their defaults instead of counting as a change
    diffs = resume_refusals(load_json(files.config), cfg)
    if diffs:
        others = [k for k in NOT_EXPERIMENT if resume_may_change(k) and k != "train.device"]
        raise ConfigError(
            "cannot resume with a different configuration (train.steps, train.device and train.precision "
            f"may change, and the other keys that are not part of the experiment but the seeds: "
            f"{', '.join(others)}): " + "; ".join(diffs)
        )
    _check_metrics_kept(files)


def _check_metrics_kept(files: RunFiles) -> None:
    """A checkpoint is only written after its evaluation's row: a resume that finds no rows
    would continue a run whose record of the steps before is gone."""
    fix = "restore it from a copy, or start the run over (delete checkpoint.pt, or train into another --out)"
    if not files.metrics.exists():
        raise FileNotFoundError(
            f"cannot resume {files.root}: metrics.jsonl is missing, so the record of the "
            f"steps before the checkpoint is gone; {fix}"
        )
    rows, _ = read_jsonl(files.metrics)
    if not rows:
        raise FileNotFoundError(
            f"cannot resume {files.root}: metrics.jsonl holds no rows, so the record of "
            f"the steps before the checkpoint is gone; {fix}"
        )


def prepare(
    cfg: RunConfig,
    files: RunFiles,
    resume: bool,
    data_dir: str | None,
    task: Task | None,
    device: torch.device,
    provenance: dict | None = None,
) -> tuple[RunState, Trainer]:
    """Build (and on resume restore) the run: task, model, optimizer, progress; write
    task.json, config.json and metrics.jsonl; position the data stream. ``provenance``: the
    code's git state and source hash, when the caller has them (runs started together)."""
    tc = cfg.train
    if tc.tensorboard:
        _tensorboard_class()  # a missing package is refused before anything is written
    # the code this run starts with
    provenance = provenance or {"git": git_state(), "source_sha256": source_hash()}
    torch.set_num_threads(tc.threads)
    task = task or build_task(cfg.task, data_dir)
    select = check_metric_names(cfg, task)
    # what rebuilding the model needs without the dataset (sizes, vocabularies): load_run reads it
    atomic_write_text(files.task, json.dumps(task.metadata(), indent=2) + "\n")
    higher = task.higher_is_better if not tc.select_metric else higher_is_better(tc.select_metric)
    tr = _build_trainer(cfg, task, device, higher)
    run = RunState(cfg, files, select, higher, provenance=provenance)
    if resume:
        restore(run, tr)
    else:
        run.prog.precision_segments = [[0, tr.precision]]
        atomic_write_text(files.config, cfg.to_json() + "\n")
        atomic_write_text(files.metrics, "")
    if tc.tensorboard:
        run.writer = _tensorboard_class()(log_dir=str(files.tensorboard))
    gen = torch.Generator().manual_seed(cfg.data_seed)
    tr.stream = train_stream(task, tc.batch_size, gen)  # its batches: task.assemble (next_batches)
    for _ in range(run.prog.step):  # fast-forward the data stream to where the checkpoint was taken
        next(tr.stream)
    return run, tr


def check_metric_names(cfg: RunConfig, task: Task) -> str:
    """The selection metric (``train.select_metric``, else ``val/<primary metric>``), after
    checking it and ``train.target_metric`` against the metrics the task reports."""
    reported = [f"val/{m}" for m in task.metric_names()]
    for key in ("select_metric", "target_metric"):
        name = getattr(cfg.train, key)
        if name and name not in reported:
            raise ConfigError(
                f"train.{key} = {name!r} is not a metric of task {cfg.task.name!r}; its validation "
                f"metrics: {', '.join(reported)}.{did_you_mean(name, reported)} (set it with --set train.{key}=...)"
            )
    return cfg.train.select_metric or f"val/{task.primary_metric}"


def _build_trainer(cfg: RunConfig, task: Task, device: torch.device, higher_select: bool) -> Trainer:
    tc = cfg.train
    torch.manual_seed(tc.seed)
    model = build_model(cfg.model, task).to(device)
    stepper = Stepper(model, cfg.optim, scaler=dev.grad_scaler(device, tc.precision))
    opt = stepper.optimizer
    sched = None
    if tc.schedule == "plateau":
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt,
            mode="max" if higher_select else "min",
            factor=tc.plateau_factor,
            patience=tc.plateau_patience,
            threshold=tc.plateau_threshold,
        )
    elif tc.schedule == "exponential":  # lr <- lr * lr_gamma every lr_step_every steps (an "epoch")
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=tc.lr_gamma)
    return Trainer(task, model, stepper, sched, device, tc.precision, lr_every=tc.lr_step_every or tc.eval_every)


def restore(run: RunState, tr: Trainer) -> None:
    """Continue from checkpoint.pt: weights, optimizer, scheduler, scaler, RNG, progress and
    carried state; then config.json and metrics.jsonl are rewritten for the continuation."""
    files, cfg = run.files, run.cfg
    # written on any device: tensors come back on this run's device (a GPU run resumes on
    # the CPU and the other way round)
    ck = load_checkpoint(files.checkpoint, full=True, map_location=tr.device)
    saved = load_json(files.config)
    _check_checkpoint_config(ck, cfg, files)
    load_weights(tr.model, ck["model"], files.checkpoint)
    try:
        tr.opt.load_state_dict(ck["optimizer"])  # moves the optimizer state to the parameters' device
        if tr.sched is not None and ck.get("scheduler") is not None:
            tr.sched.load_state_dict(ck["scheduler"])
        if tr.scaler is not None and ck.get("scaler"):
            tr.scaler.load_state_dict(ck["scaler"])
        torch.set_rng_state(ck["rng"].cpu())
        if tr.device.type == "cuda" and ck.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(ck["cuda_rng"].cpu(), tr.device)
        run.prog = Progress(**ck["progress"])
    except (ValueError, TypeError, KeyError, RuntimeError) as e:
        raise CheckpointError(
            f"{files.checkpoint} holds an optimizer/RNG/progress state that does not fit this run "
            f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}); delete it "
            f"(the run then starts over without --resume) or restore it from a copy"
        ) from None
    tr.carry = _to(ck.get("carry"), tr.device)
    run.good = (run.prog.step, ck.get("select_value"))
    if run.prog.step > cfg.train.steps:
        raise ConfigError(
            f"cannot resume {files.root} with train.steps={cfg.train.steps}: it has already trained "
            f"{run.prog.step} steps; resume with train.steps >= {run.prog.step}, or start a shorter run "
            f"in another directory"
        )
    _note_precision(run, saved.train.precision)
    _rewrite_for_resume(run, saved)


def _check_checkpoint_config(ck: dict, cfg: RunConfig, files: RunFiles) -> None:
    try:
        saved_cfg = from_dict(ck["config"]) if isinstance(ck.get("config"), dict) else None
    except ConfigError:  # written by a version whose keys differ: config.json was checked before
        saved_cfg = None
    diffs = resume_refusals(saved_cfg, cfg) if saved_cfg is not None else []
    if diffs:
        raise CheckpointError(
            f"{files.checkpoint} belongs to another configuration than {files.config} ({'; '.join(diffs[:3])}); "
            f"put it back in its own run directory, or delete it to start this run over"
        )


def _note_precision(run: RunState, saved_precision: str) -> None:
    """A resume in another precision continues as a mixed-precision run: the segments go to
    result.json, and ``rnnlab table`` keeps the run apart from pure ones."""
    segments = run.prog.precision_segments or [[0, saved_precision]]  # checkpoints before 0.3
    precision = run.cfg.train.precision
    if segments[-1][1] != precision:
        log.warning(
            f"{run.files.root} trained in {segments[-1][1]} up to step {run.prog.step} continues in "
            f"{precision}: it is recorded as a mixed-precision run (result.json precision_segments), which "
            f"`rnnlab table` keeps apart from runs in one precision"
        )
        segments = [*segments, [run.prog.step, precision]]
    run.prog.precision_segments = segments


def _rewrite_for_resume(run: RunState, saved: RunConfig) -> None:
    files, step = run.files, run.prog.step
    # an interrupted write can leave a partial last line: drop it (and any garbage line)
    rows, bad = read_jsonl(files.metrics)
    if bad:
        log.warning(f"{files.metrics}: dropped unreadable line(s) {bad} (an interrupted write)")
    keep = [json.dumps(r) for r in rows if r["step"] <= step]
    if run.cfg.train.steps != saved.train.steps:
        # the old result belongs to the old step budget: the run is unfinished until the new one
        files.result.unlink(missing_ok=True)
    atomic_write_text(files.config, run.cfg.to_json() + "\n")
    atomic_write_text(files.metrics, "".join(ln + "\n" for ln in keep))


def open_log(run: RunState, progress: bool | None) -> None:
    """Open metrics.jsonl for appending and start the clocks."""
    try:
        run.log = run.files.metrics.open("a")
    except OSError as e:
        raise write_error(run.files.metrics, e) from None
    # off a terminal (batch jobs, CI), lines instead of the progress bar
    run.lines = progress is None and not sys.stderr.isatty()
    now = time.perf_counter()
    run.t_start = now - run.prog.elapsed
    run.last_line = now
    run.window = {"start": now, "step": run.prog.step, "loss": 0.0, "n": 0}


# ---------------------------------------------------------------------------- one step


def next_batch(tr: Trainer) -> Batch:
    """The next training batch of the run's own data stream, on its device."""
    return next_batches(tr.task, [tr])[0]


def next_batches(task: Task, trs: list[Trainer]) -> list[Batch]:
    """The next training batch of each run's own data stream, on its device: each stream's
    draws, then the batches of all of them built in one pass (:meth:`Task.assemble`)."""
    return [to_device(b, tr.device) for tr, b in zip(trs, task.assemble([next(tr.stream) for tr in trs]))]


def _rows(ts: list) -> torch.Tensor:
    """The 0-d tensors ``ts`` as one (n,) tensor (differentiably)."""
    return ts[0].reshape(1) if len(ts) == 1 else torch.stack(ts)


@torch.no_grad()
def _values(ts: list, fn=None) -> list:
    """The 0-d tensors ``ts`` (or ``fn`` of them) as Python values, read in one go (one stack
    and one ``tolist`` where a loop of ``.item()`` would read each member's apart)."""
    v = ts[0].reshape(1) if len(ts) == 1 else torch.stack(ts)
    return (v if fn is None else fn(v)).tolist()


def carried_state(tr: Trainer, batch: Batch):
    """The state a batch starts from: the previous batch's (detached) final state under
    truncated BPTT (``batch.carry_state``), else None (zeros)."""
    return tr.carry if (batch.carry_state and tr.carry is not None) else None


def step_loss(tr: Trainer, out, batch: Batch):
    """``(loss, reg, total)``: the task's loss, the model's regulariser (or None), their sum."""
    loss = tr.task.loss(out, batch)
    reg = tr.model.regularization()
    return loss, reg, (loss if reg is None else loss + reg)


def check_loss(run: RunState, total, loss) -> None:
    """A non-finite training loss stops the run as diverged (its row is logged first)."""
    if not torch.isfinite(total):
        step = run.prog.step + 1
        emit(run, {"step": step, "train/loss": loss.item()})
        raise TrainingDiverged(
            f"{run.cfg.name}: the training loss became {total.item()} at step {step}; {kept(run)}. "
            f"Lower optim.lr, set optim.clip (e.g. --set optim.clip=1.0) or check the data."
        )


def after_update(run: RunState, tr: Trainer, loss: float, reg: float | None, new_state, gnorm) -> StepOut:
    """What follows the optimizer step (:meth:`Group.step`): the post-step hooks, the carried
    state, the step count and the exponential schedule. ``loss``, ``reg``: the step's values."""
    step = run.prog.step + 1
    tr.stepper.after_step()
    tr.carry = _detach(new_state)
    run.prog.step = step
    if run.cfg.train.schedule == "exponential" and step % tr.lr_every == 0:
        tr.sched.step()
    return StepOut(loss, reg, None if gnorm is None else float(gnorm))


def overflow_stop(run: RunState, loss):
    """The trainer's ``on_overflow`` for :meth:`Stepper.check_norm`: finite gradients whose norm
    overflows: clipping would scale every update to zero and the run would go on without
    learning, so it stops here as diverged. (Non-finite gradients make non-finite weights,
    which the loss and weight checks stop.)"""
    step = run.prog.step + 1

    def stop(gnorm: float) -> None:
        emit(run, {"step": step, "train/loss": loss.item(), "train/grad_norm": gnorm})
        raise TrainingDiverged(
            f"{run.cfg.name}: the gradient norm became {gnorm} at step {step} while the loss is finite "
            f"({loss.item():.4g}); clipping would scale every update to zero, so the run would no longer "
            f"learn; {kept(run)}. Lower optim.lr (e.g. --set optim.lr={run.cfg.optim.lr / 10:g})."
        )

    return stop


def log_step(run: RunState, tr: Trainer, out: StepOut, bar) -> None:
    """The training row of metrics.jsonl (every ``train.log_every`` steps and at the last)."""
    tc, step = run.cfg.train, run.prog.step
    run.window["loss"] += out.loss
    run.window["n"] += 1
    if step % tc.log_every == 0 or step == tc.steps:
        row = {"step": step, "time": round(time.perf_counter() - run.t_start, 3), "train/loss": out.loss}
        if out.reg is not None:
            row["train/reg"] = out.reg
        if out.grad_norm is not None:
            row["train/grad_norm"] = out.grad_norm
        row["lr"] = tr.opt.param_groups[0]["lr"]
        emit(run, row)
        if run.writer is not None:
            for k, v in row.items():
                if k not in ("step", "time"):
                    run.writer.add_scalar(k, v, step)
        bar.set_postfix(loss=f"{out.loss:.4g}")


def progress_line(run: RunState) -> None:
    """Off a terminal, between evaluations: a short progress line at most every
    :data:`PROGRESS_EVERY_S` seconds (a batch job's log shows the run is alive)."""
    now = time.perf_counter()
    if not run.lines or now - run.last_line < PROGRESS_EVERY_S:
        return
    run.last_line = now
    step, steps, window = run.prog.step, run.cfg.train.steps, run.window
    left = (now - window["start"]) / max(step - window["step"], 1) * (steps - step)
    show_progress(
        log,
        f"{run.cfg.name} {step}/{steps} steps ({100 * step // steps}%)  train/loss "
        f"{window['loss'] / max(window['n'], 1):.4g}  about {_duration(left)} of training left",
    )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def emit(run: RunState, row: dict) -> None:
    """Append one row to metrics.jsonl (flushed: a kill loses at most a partial line)."""
    try:
        run.log.write(json.dumps(row) + "\n")
        run.log.flush()
    except OSError as e:
        raise write_error(run.files.metrics, e) from None


def kept(run: RunState) -> str:
    """What a stopped run still has: the last good checkpoint, named."""
    if run.good is None:
        return "no good checkpoint exists (none was written before this point)"
    value = f", {run.select}={run.good[1]:.6g}" if isinstance(run.good[1], float) else ""
    return f"the last good checkpoint ({run.files.checkpoint}, step {run.good[0]}{value}) is kept"


# ---------------------------------------------------------------------------- evaluate and checkpoint


def evaluate_and_checkpoint(run: RunState, tr: Trainer, on_eval=None, metrics: dict | None = None) -> None:
    """Validation, best.pt, the schedule on plateau, early stop, the log line, checkpoint.pt.
    ``metrics``: the validation metrics when the caller computed them already (an ensemble
    evaluates all its members in one pass)."""
    tc, step, prog = run.cfg.train, run.prog.step, run.prog
    t_eval = time.perf_counter()
    s_per_step = (t_eval - run.window["start"]) / max(step - run.window["step"], 1)
    if metrics is None:
        metrics = evaluate(tr.model, tr.task, "val", tc.eval_batch_size, tc.eval_max_batches, tr.precision)
    run.last_eval = metrics
    value = run.last_eval.get(run.select, float("nan"))
    _stop_if_not_finite(run, tr, value)
    if _improved(value, prog.best_value, run.higher_select):
        prog.best_value, prog.best_step = value, step
        atomic_save(own_memory(tr.model.state_dict()), run.files.best)
    if tc.schedule == "plateau":
        tr.sched.step(value)
    if tc.target_metric and tc.target_metric in run.last_eval:
        # the target must hold at ``target_patience`` evaluations in a row (the DMU code: 5)
        hit = _reached(run.last_eval[tc.target_metric], tc.target_value, higher_is_better(tc.target_metric))
        prog.target_streak = prog.target_streak + 1 if hit else 0
        if prog.target_streak >= tc.target_patience:
            prog.stopped = "target"
    # (the s/step of this window goes to the log line and TensorBoard, not to metrics.jsonl,
    # whose rows only "time" keeps machine-dependent)
    emit(run, {"step": step, "time": round(time.perf_counter() - run.t_start, 3), **run.last_eval})
    _report_eval(run, tr, s_per_step)
    if on_eval is not None and on_eval(step, dict(run.last_eval)) and not prog.stopped and step < tc.steps:
        prog.stopped = "on_eval"
    t_ck = time.perf_counter()
    prog.eval_elapsed += t_ck - t_eval
    save_checkpoint(run, tr, value if math.isfinite(value) else None)
    now = time.perf_counter()
    prog.eval_elapsed += now - t_ck  # (this part is not in the checkpoint it times)
    run.window.update(start=now, step=step, loss=0.0, n=0)
    run.last_line = now


def checkpoint_between(run: RunState, tr: Trainer) -> bool:
    """checkpoint.pt between two evaluations, every ``train.checkpoint_every`` steps (0: never),
    so that a kill loses at most that many steps of a run whose evaluations are far apart (one
    epoch of a large model can take hours). It holds what an evaluation's checkpoint holds, and
    a resume from it continues exactly; best.pt and the metrics are not touched. Skipped while
    metrics.jsonl has no row yet (a resume needs the record of the steps before) or when the
    weights are not finite (the last good checkpoint stays). Returns whether it wrote one."""
    every, step = run.cfg.train.checkpoint_every, run.prog.step
    if not every or step % every or not run.files.metrics.stat().st_size:
        return False
    if not all_finite(tr.model.state_dict()):
        return False
    t = time.perf_counter()
    save_checkpoint(run, tr, run.good[1] if run.good else None)
    spent = time.perf_counter() - t
    run.prog.eval_elapsed += spent  # timed with evaluation and checkpointing, not training
    run.window["start"] += spent
    return True


def _stop_if_not_finite(run: RunState, tr: Trainer, value: float) -> None:
    bad = "" if all_finite(tr.model.state_dict()) else "the weights"
    if not bad and run.select in run.last_eval and not math.isfinite(value):
        bad = f"the selection metric {run.select} (= {value})"
    if bad:
        step = run.prog.step
        emit(run, {"step": step, "time": round(time.perf_counter() - run.t_start, 3), **run.last_eval})
        raise TrainingDiverged(
            f"{run.cfg.name}: {bad} became non-finite at step {step} (nothing saved at "
            f"this step); {kept(run)}. Lower optim.lr or set optim.clip (e.g. --set optim.clip=1.0)."
        )


def _report_eval(run: RunState, tr: Trainer, s_per_step: float) -> None:
    """TensorBoard scalars and, off a terminal, one line per evaluation."""
    step = run.prog.step
    if run.writer is not None:
        for k, v in run.last_eval.items():
            run.writer.add_scalar(k, v, step)
        run.writer.add_scalar("time/train_s_per_step", s_per_step, step)
        run.writer.flush()
    if run.lines:
        lr = next((g["lr"] for g in tr.opt.param_groups if g.get("tag") == "default"), tr.opt.param_groups[0]["lr"])
        train_loss = run.window["loss"] / max(run.window["n"], 1)
        show_progress(
            log, _eval_line(run.cfg.name, step, run.cfg.train.steps, train_loss, run.last_eval, lr, s_per_step)
        )


def own_memory(obj):
    """``obj`` (tensors in dicts, lists and tuples: a state dict, a checkpoint) with each tensor
    that views a larger memory replaced by a copy of itself: ``torch.save`` writes a view's whole
    memory, and an ensemble's members keep their parameters as rows of one stack per parameter
    (:meth:`rnnlab.stacked_model.StackedModel.keep_stacked`) and their carried states as rows of
    the batched state, so a member's file would hold every member's tensors. A dict keeps its
    type and attributes (a state dict's ``_metadata``)."""
    if isinstance(obj, torch.Tensor):
        if obj.layout == torch.strided and obj.untyped_storage().nbytes() > obj.numel() * obj.element_size():
            return obj.clone()
        return obj
    if isinstance(obj, dict):
        out = copy.copy(obj)
        for k, v in obj.items():
            out[k] = own_memory(v)
        return out
    if isinstance(obj, list):
        return [own_memory(v) for v in obj]
    if isinstance(obj, tuple):
        values = [own_memory(v) for v in obj]
        return type(obj)(*values) if hasattr(obj, "_fields") else type(obj)(values)
    return obj


def save_checkpoint(run: RunState, tr: Trainer, value: float | None) -> None:
    """checkpoint.pt, atomically: everything a resume needs to continue exactly."""
    run.prog.elapsed = time.perf_counter() - run.t_start
    device = tr.device
    atomic_save(
        own_memory(
            {
                "model": tr.model.state_dict(),
                "optimizer": tr.opt.state_dict(),
                "scheduler": tr.sched.state_dict() if tr.sched is not None else None,
                "rng": torch.get_rng_state(),
                "progress": vars(run.prog).copy(),
                "carry": tr.carry,
                "config": run.cfg.to_dict(),
                "select_value": value,
                "device": str(device),
                "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                "scaler": tr.scaler.state_dict() if tr.scaler is not None else None,
            }
        ),
        run.files.checkpoint,
    )
    run.good = (run.prog.step, value)


# ---------------------------------------------------------------------------- finish


def close_run(run: RunState) -> None:
    """Close the log and the TensorBoard writer (also after an error)."""
    if run.log is not None:
        try:
            run.log.close()
        except OSError:  # a failed flush already raised the error that matters
            pass
    if run.writer is not None:
        run.writer.close()


def finish(run: RunState, tr: Trainer, test: dict | None = None, conditions: dict | None = None) -> dict:
    """result.json: final and best scores, test scores of best.pt, timing and provenance.
    ``test``: the test metrics of best.pt when the caller computed them already (a group
    evaluates its members in one pass); ``conditions``: added to the record's conditions (an
    ensemble's size)."""
    tc, prog = run.cfg.train, run.prog
    if not run.last_eval:  # resumed a run that had already finished
        run.last_eval = evaluate(tr.model, tr.task, "val", tc.eval_batch_size, tc.eval_max_batches, tr.precision)
    result = _outcome(run, tr, prog.stopped or "completed")
    result["conditions"].update(conditions or {})
    if tc.test:
        if test is None:
            load_best(run, tr)
            test = evaluate(tr.model, tr.task, "test", tc.eval_batch_size, tc.eval_max_batches, tr.precision)
        result["test"] = test
    atomic_write_text(run.files.result, json.dumps(result, indent=2) + "\n")
    run.files.diverged.unlink(missing_ok=True)  # an earlier stop, since resumed and finished
    return result


def _outcome(run: RunState, tr: Trainer, stopped: str) -> dict:
    """What result.json and diverged.json share: the run, its scores so far, timing, provenance."""
    cfg, tc, prog = run.cfg, run.cfg.train, run.prog
    out = {
        "name": cfg.name,
        "task": cfg.task.name,
        "cell": cfg.model.cell,
        "seed": tc.seed,
        "data_seed": cfg.data_seed,
        "steps": prog.step,
        "stopped": stopped,
        "final": run.last_eval,
        "best": {"step": prog.best_step, run.select: prog.best_value},
        "select_metric": run.select,
        "baseline": tr.task.baseline(),
        "paper": cfg.paper,
        "params": tr.model.parameter_counts(),
        "param_groups": tr.groups,
        "wall_time_s": round(time.perf_counter() - run.t_start, 2),
        "conditions": runtime_conditions(tc.threads, tr.device, tr.precision),
        "versions": versions(),
        "config_key": config_key(cfg),
        "git": run.provenance["git"],
        "source_sha256": run.provenance["source_sha256"],
    }
    # training alone: evaluation and checkpoint writing are timed apart (eval_time_s)
    out["eval_time_s"] = round(prog.eval_elapsed, 2)
    out["train_time_s"] = round(out["wall_time_s"] - prog.eval_elapsed, 2)
    out["time_per_step_s"] = round(out["train_time_s"] / max(prog.step, 1), 4)
    out["precision_segments"] = prog.precision_segments
    return out


def record_divergence(run: RunState, tr: Trainer, e: BaseException, **conditions) -> None:
    """diverged.json: the record of a run stopped by :class:`TrainingDiverged`, written beside
    its last good checkpoint (which a resume still continues). It holds what result.json holds
    but the test scores (``steps``: the steps completed, ``reason``: the error), so a campaign
    keeps the run as evidence: it reached what its metrics.jsonl shows and, under a protocol
    that would have gone on with non-finite weights, nothing after. ``conditions``: added to
    the record's conditions (an ensemble's size). Best effort: the divergence is the error to
    report."""
    try:
        out = _outcome(run, tr, "diverged")
        out["conditions"].update(conditions)
        out["reason"] = " ".join(str(e).split())
        atomic_write_text(run.files.diverged, json.dumps(out, indent=2) + "\n")
    except Exception as w:  # noqa: BLE001
        log.warning(f"{run.files.root}: could not write {RunFiles.DIVERGED}: {w}")


def load_best(run: RunState, tr: Trainer) -> None:
    """Put best.pt's weights into the model (the weights the test scores are of), if it exists."""
    if run.files.best.exists():
        load_weights(tr.model, load_checkpoint(run.files.best, full=False, map_location=tr.device), run.files.best)


# ---------------------------------------------------------------------------- the group


@dataclass
class Member:
    """One run of a :class:`Group`: its seed, configuration, run directory and how it stands.

    ``status``: ``pending``, ``training``, then ``trained`` / ``resumed`` (finished here),
    ``done`` (was finished before), ``busy`` (another process holds its lock) or ``failed``."""

    seed: int
    cfg: RunConfig
    root: Path
    status: str = "pending"
    error: str = ""
    exc: BaseException | None = None
    result: dict | None = None
    resume: bool = False
    run: RunState | None = None
    tr: Trainer | None = None
    lock: claim | None = None
    # the global RNG state the member's single run would have (saved in its checkpoints) where
    # members share one process's stream; None: the global stream is the member's own
    rng: torch.Tensor | None = None

    @property
    def training(self) -> bool:
        return self.status == "training"

    def failed(self, e: BaseException) -> None:
        self.status, self.exc = "failed", e
        self.error = f"{type(e).__name__}: " + " ".join(str(e).split())

    def release(self) -> None:
        """Give back the run directory's lock, if the member holds it."""
        if self.lock is not None:
            self.lock.__exit__(None, None, None)
            self.lock = None

    def own_rng(self) -> None:
        """Put the member's random state in the global stream (what its files record)."""
        if self.rng is not None:
            torch.set_rng_state(self.rng)


class _NoBar:
    def set_postfix(self, **_):
        pass


def _grads_own_memory(params) -> None:
    """Give every gradient its own memory. The gradients of a batched model's members arrive as
    slices of the stacked parameters' gradients, and two parameters that enter the forward pass
    as one sum (an RNN's b_ih + b_hh) receive slices of one tensor; clipping scales gradients in
    place, so such a pair would be scaled twice. (The stacked optimizer step only reads them: it
    needs no copies.)"""
    for p in params:
        g = p.grad
        if g is not None and g.untyped_storage().nbytes() != g.numel() * g.element_size():
            p.grad = g.clone()


class Group:
    """Members that train together, each the run of its own directory: the one training loop.
    A single run is a group of one (:func:`train`); an ensemble (:class:`rnnlab.ensemble.Ensemble`)
    is a group whose members' forward passes and evaluations run as one batched model.

    Each step of the loop is taken for every member at the same step count (members behind,
    after a resume from checkpoints of different steps, catch up first): :meth:`step` (the
    data, the forward pass, the losses, one backward pass for all, clipping by each member's
    own norm, the optimizer step over members, the post-step hooks, the training row), then
    :meth:`evaluate` (validation of all, then per member best.pt, the schedule, early stop,
    checkpoint.pt) or :meth:`checkpoint_between`, and :meth:`finish` (test scores of best.pt,
    result.json) for members that stopped or reached their step budget. A member that fails
    (diverged, a write error) records it (diverged.json) and stops; in a group of one the error
    is raised (``goes_on`` false), in an ensemble the others go on.

    What a batched group overrides: :meth:`forward`, :meth:`evaluate_members`,
    :meth:`conditions`, :meth:`report` and :meth:`held_signals`; ``stacked_step`` (an
    :class:`rnnlab.stacked_optim.StackedStep`, or None: each member's optimizer steps alone)."""

    goes_on = False  # a failed member stops alone (True), or its error is raised (False)

    def __init__(self, members: list[Member], task: Task, device: torch.device, on_eval=None):
        self.members, self.task, self.device, self.on_eval = members, task, device, on_eval
        self.cfg = members[0].cfg
        self.precision = self.cfg.train.precision
        self.size = len(members)
        self.stacked_step = None
        self.bar = _NoBar()
        self.stop = None  # a callable: true stops after the next evaluation (Ctrl-C in a suite)

    # --- what a batched group computes otherwise -----------------------------------------
    def forward(self, ms: list[Member], batches: list[Batch], states: list) -> list[tuple]:
        """Each member's ``(output, new state)`` on its batch (under the run's autocast)."""
        return [model_forward(m.tr.model, b, s) for m, b, s in zip(ms, batches, states)]

    def evaluate_members(self, ms: list[Member], split: str) -> list[dict]:
        """The metrics of each member's model on ``split``."""
        tc = self.cfg.train
        return [
            evaluate(m.tr.model, self.task, split, tc.eval_batch_size, tc.eval_max_batches, self.precision) for m in ms
        ]

    def conditions(self) -> dict:
        """What the members' records add to their conditions."""
        return {}

    def report(self, ms: list[Member], why: str) -> None:
        """Off a terminal, between evaluations: the run's progress line (each evaluation's line
        is written by :func:`evaluate_and_checkpoint`)."""
        if why == "progress":
            for m in ms:
                progress_line(m.run)

    def held_signals(self):
        """A context yielding the function to call between steps for signals held back."""
        return contextlib.nullcontext(lambda: None)

    # --- per member ----------------------------------------------------------------------
    def fail(self, m: Member, e: BaseException) -> None:
        """``m`` stops: diverged.json for a divergence, its files closed and its lock released;
        raised again unless the group ``goes_on``."""
        if isinstance(e, TrainingDiverged):
            record_divergence(m.run, m.tr, e, **self.conditions())
        m.failed(e)
        close_run(m.run)
        m.release()
        if not self.goes_on:
            raise e
        log.warning(f"{m.root}: {m.error}")

    # --- one step ------------------------------------------------------------------------
    def losses(self, ms: list[Member], batches: list[Batch], states: list) -> tuple:
        """The forward pass and each member's loss terms (under the run's autocast): ``(loss,
        reg, total, new)``, the task losses, the regularisers (or None) and their sums as (n,)
        tensors, and each member's new state."""
        outs = self.forward(ms, batches, states)
        terms = [step_loss(m.tr, out, b) for m, b, (out, _) in zip(ms, batches, outs)]
        loss, reg, total = ([t[i] for t in terms] for i in range(3))
        return _rows(loss), None if reg[0] is None else _rows(reg), _rows(total), [new for _, new in outs]

    def step(self, ms: list[Member]) -> None:
        """One optimizer step of every member in ``ms`` (all at the same step). What the
        members' tensors are read for (finite losses, the logged values, the norms) is read
        once for all of them, not member by member."""
        batches = next_batches(self.task, [m.tr for m in ms])
        states = [carried_state(m.tr, b) for m, b in zip(ms, batches)]
        with dev.autocast(self.device, self.precision):
            loss, reg, total, news = self.losses(ms, batches, states)
        ok = []
        for i, (m, fine) in enumerate(zip(ms, torch.isfinite(total.detach()).tolist())):
            try:
                if not fine:
                    check_loss(m.run, total[i], loss[i])
            except Exception as e:
                self.fail(m, e)
                continue
            ok.append(i)
        if not ok:
            return
        for i in ok:
            for p in ms[i].tr.params:  # opt.zero_grad(set_to_none=True) without its hooks
                p.grad = None
        # the members' losses are independent: the gradient of their sum is each one's own
        if any(ms[i].tr.scaler is not None for i in ok):  # fp16: each member's scale
            sum(ms[i].tr.stepper.scaled(total[i]) for i in ok).backward()
        else:
            (total if len(ok) == len(ms) else total[torch.tensor(ok)]).sum().backward()
        loss = loss.detach()
        loss_values = loss.tolist()
        reg_values = [None] * len(ms) if reg is None else reg.detach().tolist()
        ms_ok = [ms[i] for i in ok]
        norms = self._stacked_step(ms_ok)  # (reads the gradients, scales none in place)
        if norms is None:  # each member's clipping scales its gradients in place
            for m in ms_ok:
                _grads_own_memory(m.tr.params)
        elif any(n is not None for n in norms):  # members without clipping (threshold 0) have none
            have = [k for k, n in enumerate(norms) if n is not None]
            read = dict(zip(have, _values([norms[k] for k in have])))
            norms = [read.get(k) for k in range(len(norms))]
        for k, i in enumerate(ok):
            m = ms[i]
            try:
                stop = overflow_stop(m.run, loss[i])
                if norms is None:  # each member's optimizer alone (clipping, the fp16 scaler)
                    gnorm = m.tr.stepper.clip_and_step(stop)
                else:  # stepped together: the stop on an overflowing norm
                    gnorm = m.tr.stepper.check_norm(norms[k], stop)
                out = after_update(m.run, m.tr, loss_values[i], reg_values[i], news[i], gnorm)
                log_step(m.run, m.tr, out, self.bar)
            except Exception as e:
                self.fail(m, e)

    def _stacked_step(self, ms: list[Member]) -> list | None:
        """The optimizer steps of ``ms`` as one (``stacked_step``, with clipping): each member's
        gradient norm ([None] * n without clipping), or None where it does not apply."""
        if self.stacked_step is None or ms[0].tr.scaler is not None:
            return None
        clips = [m.cfg.optim.clip for m in ms]  # each member's own threshold (a grid may differ in it)
        return self.stacked_step.step([m.tr.opt for m in ms], [m.tr.params for m in ms], clips)

    # --- evaluation, checkpoints, the end ------------------------------------------------
    def evaluate(self, ms: list[Member]) -> None:
        """Validation of ``ms`` (one pass), then each member's :func:`evaluate_and_checkpoint`."""
        t0 = time.perf_counter()
        metrics = self.evaluate_members(ms, "val")
        shared = time.perf_counter() - t0
        for m, met in zip(ms, metrics):
            m.run.prog.eval_elapsed += shared  # the one pass, timed as each member's evaluation
            m.run.window["start"] += shared  # (and not as training time)
            try:
                m.own_rng()  # checkpoint.pt records the single run's random state
                evaluate_and_checkpoint(m.run, m.tr, self.on_eval, met)
            except Exception as e:
                self.fail(m, e)
        self.report(ms, "eval")

    def checkpoint_between(self, ms: list[Member]) -> None:
        """Each member's checkpoint between evaluations (:func:`checkpoint_between`)."""
        for m in ms:
            try:
                m.own_rng()
                checkpoint_between(m.run, m.tr)
            except Exception as e:
                self.fail(m, e)

    def finish(self, ms: list[Member]) -> None:
        """Close and finish members that stopped or reached their step budget: test scores of
        their best.pt in one pass, then each result.json."""
        if not ms:
            return
        for m in ms:
            close_run(m.run)
        fresh = [m for m in ms if not m.run.last_eval]  # resumed runs that had already finished
        for m, met in zip(fresh, self.evaluate_members(fresh, "val") if fresh else []):
            m.run.last_eval = met
        tests: list = [None] * len(ms)
        if self.cfg.train.test:
            for m in ms:
                load_best(m.run, m.tr)
            tests = self.evaluate_members(ms, "test")
        for m, test in zip(ms, tests):
            try:
                m.own_rng()
                m.result = finish(m.run, m.tr, test, self.conditions())
            except Exception as e:
                self.fail(m, e)
                continue
            m.status = "resumed" if m.resume else "trained"
            m.release()

    # --- the loop ------------------------------------------------------------------------
    def run(self, progress: bool | None) -> None:
        """Train every member to its end (or stop, or failure)."""
        from tqdm.auto import tqdm

        tc = self.cfg.train
        self.finish([m for m in self.members if m.training and _ended(m)])
        start = min((m.run.prog.step for m in self.members if m.training), default=tc.steps)
        bar = tqdm(
            total=tc.steps,
            initial=start,
            disable=(None if progress is None else not progress),
            desc=self.cfg.name + (f" x{self.size}" if self.goes_on else ""),
            dynamic_ncols=True,
            leave=False,
        )
        self.bar = bar if self.size == 1 else _NoBar()  # the loss of a lone member on the bar
        try:
            with self.held_signals() as handle_pending:
                self._loop(bar, start, handle_pending)
        finally:
            bar.close()
            for m in self.members:
                if m.training:  # interrupted: the last checkpoint stays, a resume continues from it
                    close_run(m.run)
                    m.release()
                    m.status, m.error = "failed", "interrupted"

    def _loop(self, bar, shown: int, handle_pending) -> None:
        tc = self.cfg.train
        while True:
            alive = [m for m in self.members if m.training]
            if not alive:
                break
            low = min(m.run.prog.step for m in alive)
            ms = [m for m in alive if m.run.prog.step == low]  # members behind catch up first
            self.step(ms)
            handle_pending()  # a Ctrl-C held during the step raises here
            ms = [m for m in ms if m.training]
            step = low + 1
            if step % tc.eval_every == 0 or step == tc.steps:
                self.evaluate(ms)
                if self.stop is not None and self.stop():  # every member has just checkpointed
                    raise KeyboardInterrupt("stop requested: stopped at the members' checkpoints")
            else:
                self.checkpoint_between(ms)
                self.report(ms, "progress")
            handle_pending()
            self.finish([m for m in ms if m.training and _ended(m)])
            now = min((m.run.prog.step for m in self.members if m.training), default=tc.steps)
            if now > shown:
                bar.update(now - shown)
                shown = now


def _ended(m: Member) -> bool:
    return bool(m.run.prog.stopped) or m.run.prog.step >= m.cfg.train.steps
