"""Many seeds in one process: the seeds of one configuration trained as one batched model.

The papers' claims rest on many runs of small models (DMU: 51 seeds per module on each
synthetic task). Such runs are bound by per-time-step overhead, not arithmetic, so E members
that run every time step as one batched computation pay that overhead once.

:func:`train_ensemble` trains members that differ only in their seed. Each member is the
single run of its seed:

* it has its own model (built as ``train`` builds it: the same initial weights, bit for bit),
  its own optimizer, clipping, schedule, post-step hooks (``parametrize.after_optimizer_step``)
  and its own data stream (its ``data_seed``), all through the one training loop
  (:class:`rnnlab.train.Group`; :class:`Ensemble` is its batched kind);
* only the forward pass over time (and so its backward) is batched: each step stacks the
  members' parameters, runs the model once under ``torch.func.vmap`` (``functional_call`` of one
  template copy, :class:`StackedModel`) and backpropagates into each member's own leaves. The
  members' losses are independent, so the gradient of their sum is each member's own gradient;
* its run directory is written by the trainer's steps: ``config.json``, ``metrics.jsonl``,
  ``checkpoint.pt``, ``best.pt`` and ``result.json`` hold what the single run writes, under the
  same names and keys (``result.json``'s ``conditions`` adds ``ensemble``, the number of members
  trained together, because the timing fields are the ensemble's), so ``rnnlab table``,
  ``thresholds``, ``load_run``, ``evaluate`` and the ledger see no difference;
* per member: the run lock, skip-if-finished, resume from its own checkpoint, early stopping
  and ``target_value`` (a member that stops is finished, and its ``result.json`` written, then),
  and divergence (a member whose loss, gradient norm or weights become non-finite stops with its
  last good checkpoint, as the single run would; the others go on).

Validation and test evaluations run all members in one pass too (they share the task's fixed
evaluation data). Inside ``vmap`` each cell runs its batched path,
:meth:`rnnlab.cells.Cell.batched_sequence` (the batched model: :mod:`rnnlab.stacked_model`);
see docs/ensembles.md for the measurements behind that choice.

Refused, with a message: dropout (a single run draws its masks from the global random stream,
which a batched model cannot reproduce per member) and encoder-decoder tasks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from . import device as dev
from ._compat import moved_attribute
from .cells.base import check_lengths, iter_cells
from .config import ConfigError, RunConfig, validate
from .rundir import (
    RunFiles,
    RunLocked,
    claim,
    git_state,
    source_hash,
)
from .runtime import PROGRESS_EVERY_S, caller_state_kept, show_progress
from .stacked_model import StackedModel
from .stacked_optim import StackedStep
from .tasks import build_task
from .tasks.base import Batch, Task, max_steps
from .train import (
    Group,
    Member,
    check_run_dir,
    check_start,
    close_run,
    open_log,
    prepare,
    start_mode,
)

log = logging.getLogger(__name__)

__all__ = [
    "Ensemble",
    "EnsembleFailed",
    "Member",
    "StackedModel",
    "check_ensemble",
    "check_ensemble_precision",
    "check_members_fit",
    "member_bytes",
    "MEMBER_KEYS",
    "member_configs",
    "member_key",
    "member_labels",
    "member_values",
    "run_members",
    "started",
    "train_ensemble",
]


#: public names that moved out of this module (importable from here with a DeprecationWarning)
MOVED = {
    "AUTOCAST_PRODUCTS": "rnnlab.stacked_model",
    "EVAL_ELEMENTS": "rnnlab.stacked_model",
    "batched_template": "rnnlab.stacked_model",
}


def __getattr__(name: str):
    if name in MOVED:
        return moved_attribute(__name__, MOVED, name)
    if name == "VMAP_PATHS":  # moved onto the cells: Cell.batched_sequence
        import warnings

        from .cells import CELLS
        from .cells.base import batched_paths

        warnings.warn(
            "rnnlab.ensemble.VMAP_PATHS is deprecated (it goes in the next release): a cell's batched "
            "path is its method batched_sequence now; rnnlab.cells.base.batched_paths(CELLS.values()) "
            "lists the classes that define their own",
            DeprecationWarning,
            stacklevel=2,
        )
        return batched_paths(CELLS.values())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class EnsembleFailed(RuntimeError):
    """Some members failed (diverged, could not be written) while the others finished:
    ``results`` holds the finished members' results by seed, ``errors`` the failures by seed
    (both by (learning rate, seed) where :func:`train_ensemble` was given per-member rates, by
    (value, ..., seed) where it was given per-member settings)."""

    def __init__(self, message: str, results: dict, errors: dict):
        super().__init__(message)
        self.results, self.errors = results, errors


#: the keys in which the members of one ensemble may differ, each exact per member: the seed;
#: the learning rates (each member's optimizer steps at its own; rnnlab.stacked_optim runs torch's
#: update once per rate, so a member at lr a equals its single run at a); the clipping threshold
#: (the stacked step clips each member by its own norm, once per threshold); and options that only
#: initialise a member's weights (its model is built as its single run's): the LT-RNN's input
#: scale and bias value. A grid over these keys x seeds trains as one batched model; a key that
#: changes shapes or the forward pass (batch size, width, task) stays a separate configuration.
MEMBER_KEYS = (
    "train.seed",
    "optim.lr",
    "optim.group_lr",
    "optim.clip",
    "model.cell_options.input_scale",
    "model.cell_options.bias_value",
)


def member_key(key: str) -> bool:
    """Whether the dotted config key ``key`` (or a key below it) is one members may differ in."""
    return any(key == k or key.startswith(k + ".") for k in MEMBER_KEYS)


def _get(cfg: RunConfig, key: str):
    """The value of the dotted config key ``key`` in ``cfg`` (None where it is not set)."""
    section, name, *rest = key.split(".")
    node = getattr(getattr(cfg, section), name, None)
    for r in rest:
        node = node.get(r) if isinstance(node, dict) else None
    return node


def _with(cfg: RunConfig, key: str, value) -> RunConfig:
    """``cfg`` with the dotted key ``key`` (a field, or an entry of a table field such as
    ``model.cell_options``) set to ``value``, as ``--set key=value`` sets it."""
    section, name, *rest = key.split(".")
    sec = getattr(cfg, section)
    if not rest:
        default = getattr(type(sec)(), name, None)
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        return dataclasses.replace(cfg, **{section: dataclasses.replace(sec, **{name: value})})
    if len(rest) != 1 or not isinstance(getattr(sec, name, None), dict):
        raise ConfigError(f"{key!r} names no config key a member can set (e.g. optim.clip)")
    table = {**getattr(sec, name), rest[0]: value}
    return dataclasses.replace(cfg, **{section: dataclasses.replace(sec, **{name: table})})


def member_values(cfg: RunConfig, keys: Sequence[str] = MEMBER_KEYS[1:]) -> dict:
    """``{key: value}`` of ``cfg`` for the keys members may differ in besides the seed."""
    return {k: _get(cfg, k) for k in keys}


def _short(key: str) -> str:
    """How folder names and messages name a member key: its last part, "lr" for optim.lr."""
    return key.rsplit(".", 1)[-1]


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def member_configs(
    cfg: RunConfig,
    seeds: Sequence[int],
    lrs: Sequence[float] | None = None,
    settings: Sequence[dict] | None = None,
) -> list[RunConfig]:
    """``cfg`` with ``train.seed`` set to each of ``seeds`` (what ``--set train.seed=k`` gives).

    ``settings`` (one table per member, as long as ``seeds``, all with the same keys, each a
    key of :data:`MEMBER_KEYS` but the seed): member k also has ``settings[k]`` set, as ``--set
    key=value`` sets it, e.g. ``seeds=[0, 0], settings=[{"optim.clip": 1.0}, {"optim.clip": 10.0}]``.
    ``lrs`` (one learning rate per member) is ``settings=[{"optim.lr": lr}, ...]``: a grid of
    rates x seeds is the two lists expanded, e.g. ``seeds=[0, 1, 0, 1], lrs=[1e-3, 1e-3, 1e-2, 1e-2]``."""
    if lrs is not None:
        if settings is not None:
            raise ConfigError("give the members' learning rates in lrs=[...] or in settings=[...], not both")
        lrs = list(lrs)
        if len(lrs) != len(seeds):
            raise ConfigError(
                f"{len(lrs)} learning rates for {len(seeds)} members: give one learning rate per member "
                f"(a grid of rates x seeds expanded into two lists of equal length), got lrs={lrs}, seeds={list(seeds)}"
            )
        for s, lr in zip(seeds, lrs):
            if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
                raise ConfigError(
                    f"the learning rate of the member with seed {s} must be a finite number > 0, got {lr!r}; "
                    f"fix it in lrs=[...]"
                )
        settings = [{"optim.lr": float(lr)} for lr in lrs]
    base = [dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=int(s))) for s in seeds]
    if settings is None:
        return base
    settings = [dict(t) for t in settings]
    if len(settings) != len(seeds):
        raise ConfigError(
            f"{len(settings)} member settings for {len(seeds)} members: give one table of settings per member "
            f"(a grid x seeds expanded into two lists of equal length), got seeds={list(seeds)}"
        )
    keys = list(settings[0]) if settings else []
    for s, t in zip(seeds, settings):
        if list(t) != keys:
            raise ConfigError(
                f"the member with seed {s} sets {sorted(t)} where the first sets {sorted(keys)}: give every "
                f"member the same keys in settings=[...]"
            )
        bad = [k for k in t if k == "train.seed" or not member_key(k)]
        if bad:
            raise ConfigError(
                f"members of one ensemble cannot differ in {bad}: they may differ in {', '.join(MEMBER_KEYS[1:])} "
                f"(and the seed, given in seeds=[...]); train other settings apart"
            )
    out = []
    for c, s, t in zip(base, seeds, settings):
        for k, v in t.items():
            c = _with(c, k, v)
        try:
            validate(c)
        except ConfigError as e:
            raise ConfigError(f"the member with seed {s} at {t}: {e}") from None
        out.append(c)
    return out


def _folder(cfg: RunConfig, keys: Sequence[str]) -> str:
    """A member's folder for its own settings ``keys``: ``lr0.001``, ``clip1-input_scale0.5``."""
    return "-".join(f"{_short(k)}{_fmt(_get(cfg, k))}" for k in keys)


def _shared(cfg: RunConfig) -> dict:
    """``cfg`` without the keys members may differ in (:data:`MEMBER_KEYS`)."""
    d = cfg.to_dict()
    for key in MEMBER_KEYS:
        *path, name = key.split(".")
        node = d
        for p in path:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(name, None)
    return d


def member_labels(members: Sequence) -> list[str]:
    """How messages name each of ``members`` (:class:`Member`): its seed, and its own settings
    (learning rate, clipping, ...) where the members differ in them."""
    values = [member_values(m.cfg) for m in members]
    differ = [k for k in MEMBER_KEYS[1:] if len({repr(v[k]) for v in values}) > 1]
    out = []
    for m, v in zip(members, values):
        own = ", ".join(f"{_short(k)} {_fmt(v[k])}" for k in differ)
        out.append(f"seed {m.seed}" + (f" at {own}" if own else ""))
    return out


def check_ensemble(cfgs: Sequence[RunConfig], task: Task | None = None) -> None:
    """The members can train as one batched model: they differ only in ``train.seed`` and their
    learning rates (:data:`MEMBER_KEYS`), no two alike, use no dropout, and the task (if given)
    is not an encoder-decoder task."""
    if not cfgs:
        raise ConfigError("an ensemble needs at least one seed (e.g. --seeds 0-4)")
    ids = [(c.train.seed, member_values(c)) for c in cfgs]
    if len({repr(i) for i in ids}) != len(ids):
        seeds = [c.train.seed for c in cfgs]
        raise ConfigError(
            f"the members of an ensemble must be distinct runs (seed and their own settings: learning rates, "
            f"clipping, init scales), got seeds {seeds} at learning rates {[c.optim.lr for c in cfgs]}"
        )
    first = _shared(cfgs[0])
    for c in cfgs[1:]:
        if _shared(c) != first:
            from .rundir import differences

            diff = {k: v for k, v in differences(cfgs[0], c).items() if not member_key(k)}
            raise ConfigError(
                f"the members of an ensemble may differ only in {', '.join(MEMBER_KEYS)}; the member with seed "
                f"{c.train.seed} (lr {c.optim.lr:g}) differs from the one with seed {cfgs[0].train.seed} (lr "
                f"{cfgs[0].optim.lr:g}) in {sorted(diff)}: train them apart (a suite's [grid] over such a key "
                f"makes each of its values a separate ensemble)"
            )
    if cfgs[0].model.dropout > 0:
        raise ConfigError(
            f"model.dropout = {cfgs[0].model.dropout}: dropout masks come from the global random stream, which "
            f"one batched model cannot draw as each single run would; train these seeds without --ensemble"
        )
    if task is not None and task.model_kind != "sequence":
        raise ConfigError(
            f"task {cfgs[0].task.name!r} trains an encoder-decoder ({task.model_kind}); ensembles "
            f"batch sequence models only: train these seeds without --ensemble"
        )


#: values a member's step keeps per input feature and output, per sequence and step (the encoded
#: inputs, the outputs, their gradients); the recurrent layers' values are their cells' own
#: (:meth:`rnnlab.cells.Cell.step_values`)
ACTIVATIONS_PER_UNIT = 32
#: the same for an evaluation, which keeps no gradients and reads the shared inputs in place: the
#: encoded inputs and the outputs, from above (32 counted 18 GiB for 51 members of
#: dmu/noisy_sequence-gru, whose 100-symbol one-hot inputs dominate; the process peaks near 1 GiB)
EVAL_VALUES_PER_FEATURE = 4
#: memory kept aside for what every ensemble needs once (libraries, the task's data, buffers)
RESERVED_BYTES = 512 * 2**20
#: of each parameter, a member keeps: the weight, its gradient, up to two optimizer moments, its
#: slice of the stacked weights and of their gradient
COPIES_PER_PARAMETER = 6


def member_bytes(cfg: RunConfig, task: Task) -> int:
    """The memory one member of an ensemble of ``cfg`` needs, estimated from above: its
    parameters (:data:`COPIES_PER_PARAMETER` copies) and the larger of a training step's and an
    evaluation's activations: per sequence of the batch (``train.batch_size``,
    ``train.eval_batch_size``) and per step of the task's longest sequence of that split
    (:meth:`rnnlab.tasks.Task.max_steps`, not the first batch's: variable lengths pad a batch to
    its longest), what each recurrent cell's step holds (:meth:`rnnlab.cells.Cell.step_values`)
    and :data:`ACTIVATIONS_PER_UNIT` per input feature and output (:data:`EVAL_VALUES_PER_FEATURE`
    evaluating)."""
    need = _needs(cfg, task)
    return need["params"] + max(need["train"], need["evaluate"])


def _needs(cfg: RunConfig, task: Task) -> dict[str, int]:
    """:func:`member_bytes` in parts (bytes a member): ``params``, ``train`` and ``evaluate``
    activations, and ``chunk``, the members that evaluate at once (:func:`rnnlab.stacked_model.eval_chunk`)."""
    from .model import build_model
    from .stacked_model import eval_chunk

    try:
        with torch.device("meta"):  # sizes only: nothing is allocated
            model = build_model(cfg.model, task)
    except Exception:  # an initialisation the meta device cannot run: build it for real (one member)
        model = build_model(cfg.model, task)
    params = sum(p.numel() for p in model.parameters())
    features = max(task.output_size, 1) + max(task.input_size, 1)
    io, eval_io = ACTIVATIONS_PER_UNIT * features, EVAL_VALUES_PER_FEATURE * features
    cells = list(iter_cells(model))
    tc = cfg.train
    B, EB = tc.batch_size, tc.eval_batch_size
    train = B * max_steps(task, "train", B) * (sum(c.step_values(True) for c in cells) + io)
    splits = ("val", "test") if tc.test else ("val",)
    T_eval = max(max_steps(task, s, EB) for s in splits)
    evaluate = EB * T_eval * (sum(c.step_values(False) for c in cells) + eval_io)
    chunk = min(eval_chunk(model, task, s, EB) for s in splits)
    # float32: the weights' dtype under every train.precision
    return {"params": 4 * COPIES_PER_PARAMETER * params, "train": 4 * train, "evaluate": 4 * evaluate, "chunk": chunk}


def _ensemble_bytes(need: dict[str, int], n: int) -> int:
    """What ``n`` members need at once: every member's parameters, and the larger of all members'
    training activations and one evaluation chunk's (at least two members each: a member that
    steps alone runs beside a copy of itself, LONE_MEMBER in :mod:`rnnlab.stacked_model`)."""
    k = max(n, 2)
    return n * need["params"] + max(k * need["train"], min(k, max(need["chunk"], 2)) * need["evaluate"])


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def check_members_fit(cfg: RunConfig, n: int, task: Task, device: torch.device) -> None:
    """Refuse an ensemble of ``n`` members that would not fit in ``device``'s available memory
    (:func:`member_bytes` each: all members train at once, an evaluation runs them in chunks, and a
    member that steps alone runs beside a copy of itself), in one line saying how many do, before
    anything is allocated."""
    free = dev.available_memory(device)
    if free is None:
        return
    free = max(free - RESERVED_BYTES, 0)
    need = _needs(cfg, task)
    total = _ensemble_bytes(need, n)
    if total <= free:
        return
    fit = 0
    while fit < n and _ensemble_bytes(need, fit + 1) <= free:
        fit += 1
    advice = "not one member fits (one member runs beside a copy of itself); lower"
    if fit >= 1:
        example = f"--seeds 0-{fit - 1}" if fit > 1 else "--seeds 0"
        advice = f"{fit} member{'s' * (fit != 1)} fit; train at most {fit} seeds at once (e.g. {example}) or lower"
    each = need["params"] + max(need["train"], need["evaluate"])
    raise ConfigError(
        f"an ensemble of {n} member{'s' * (n != 1)} needs about {_gib(total)} ({_gib(each)} a member: its "
        f"weights, gradients, optimizer state and the activations of a training batch or an evaluation batch "
        f"of the task's longest sequences), but {device} has {_gib(free)} available: {advice} "
        f"train.batch_size or train.eval_batch_size, or train the seeds without --ensemble"
    )


def check_ensemble_precision(cfg: RunConfig, task: Task | None, device: torch.device) -> None:
    """A member computes in bf16/fp16 as its single run does (docs/ensembles.md), or the
    combination is refused here in one line: a cell whose batched path is its step loop (the
    single run takes its fast path, which rounds otherwise), and the LSTM off the CPU (its
    single run's cuDNN kernel computes in the low precision throughout)."""
    precision = cfg.train.precision
    if precision == "fp32":
        return
    from .cells import CELLS, LSTMCell
    from .cells.base import batched_path

    cls = CELLS.get(cfg.model.cell)
    if cls is None:
        return
    path = batched_path(cls)
    why = None
    if path == "reference":
        why = "its batched path is the step loop, which rounds otherwise than the single run's fast path"
    elif path is LSTMCell.batched_sequence and device.type != "cpu":
        why = f"its single run on {device.type} runs ATen's kernel in {precision}, which the batched LSTM does not"
    if why:
        raise ConfigError(
            f"train.precision = {precision!r} with model.cell = {cfg.model.cell!r} cannot train as an "
            f"ensemble ({why}): train these seeds without --ensemble, or with --precision fp32"
        )


def _signature(batch: Batch, state) -> tuple:
    """Batches that can run in one vmap call: the same shapes, dtypes and kinds of state."""
    shapes = tree_map(lambda t: tuple(t.shape), state) if state is not None else None
    return (tuple(batch.x.shape), batch.x.dtype, batch.lengths is None, repr(shapes))


def _members_lengths(lengths: list, T: int, B: int) -> torch.Tensor:
    """The members' lengths as one (E, B) tensor, checked (:func:`check_lengths`) in one pass
    over all of them; where that finds a fault, member by member, for the message."""
    ls = [torch.as_tensor(v) for v in lengths]
    if all(v.shape == (B,) and v.dtype == torch.long for v in ls):
        stacked = torch.stack(ls)
        if B == 0 or not bool((stacked.min() < 1) | (stacked.max() > T)):
            return stacked
    for v in ls:
        check_lengths(v, T, B)
    return torch.stack(ls)


def _stack(trees: list):
    return tree_map(lambda *ts: torch.stack(ts), *trees)


def _unstack(tree, n: int) -> list:
    """The ``n`` members' parts of a stacked state ``tree`` (tensors with the members first):
    each leaf unbound once, not indexed once a member."""
    if isinstance(tree, torch.Tensor):
        return list(tree.unbind(0))
    leaves, spec = tree_flatten(tree)
    rows = [leaf.unbind(0) if isinstance(leaf, torch.Tensor) else [leaf] * n for leaf in leaves]
    return [tree_unflatten([r[j] for r in rows], spec) for j in range(n)]


def _optimizer_layout(m: Member) -> list[list[int]] | None:
    """The member's parameters as its optimizer groups them: per group, the parameters' indices
    in ``named_parameters`` order (None where the groups hold other tensors or miss one): the
    layout of the kept stacks that the stacked optimizer step updates in place."""
    index = {id(p): i for i, (_, p) in enumerate(m.tr.model.named_parameters())}
    groups = [[index.get(id(p)) for p in g["params"]] for g in m.tr.opt.param_groups]
    return None if any(i is None for g in groups for i in g) else groups


# ---------------------------------------------------------------------------- the driver


class Ensemble(Group):
    """Members training together as one batched model: the group's loop (:class:`rnnlab.train.Group`)
    with the forward pass and the evaluations of all members in one ``vmap`` call
    (:class:`StackedModel`), the optimizer step stacked (:class:`StackedStep`) where it applies,
    signals held between steps, a failed member stopping alone, and one progress line for all."""

    goes_on = True

    def __init__(
        self, members: list[Member], task: Task, device: torch.device, on_eval, lines: bool, fast: bool = True
    ):
        super().__init__(members, task, device, on_eval)
        self.lines = lines
        self.stacked = StackedModel(members[0].tr.model, fast)
        self.stacked_step = StackedStep.build([m.tr.opt for m in members]) if fast else None
        # the members' parameters as rows of stacks kept between steps (StackedModel.keep_stacked),
        # where a gradient reaches them through the batched forward pass alone: a regulariser's
        # gradient adds to a parameter's in autograd's order, which the stacks' hook would not keep
        with torch.no_grad():
            self.keep = fast and members[0].tr.model.regularization() is None
        self.layout = _optimizer_layout(members[0])
        self.last_line = time.perf_counter()

    def conditions(self) -> dict:
        return {"ensemble": self.size}  # the timing fields are the ensemble's

    def held_signals(self):
        return signals_between_steps()

    def forward(self, ms: list[Member], batches: list[Batch], states: list) -> list[tuple]:
        """One vmap call per kind of batch (the same shapes and kinds of state: all, but after a
        resume from checkpoints of different steps under truncated BPTT)."""
        outs: list = [None] * len(ms)
        for idx, out, new in self._stacked(ms, batches, states):
            for j, (i, state) in enumerate(zip(idx, _unstack(new, len(idx)))):
                outs[i] = (out[j], state)
        return outs

    def _stacked(self, ms: list[Member], batches: list[Batch], states: list):
        """Per kind of batch: the members' indices, their stacked outputs and new states."""
        kinds: dict[tuple, list[int]] = {}
        for i, (b, s) in enumerate(zip(batches, states)):
            kinds.setdefault(_signature(b, s), []).append(i)
        for idx in kinds.values():
            x = torch.stack([batches[i].x for i in idx])
            lengths = None
            if batches[idx[0]].lengths is not None:
                lengths = _members_lengths([batches[i].lengths for i in idx], x.shape[2], x.shape[1])
            state = None if states[idx[0]] is None else _stack([states[i] for i in idx])
            models = [ms[i].tr.model for i in idx]
            if self.keep and len(models) > 1 and not self.stacked.keeps(models):
                self.stacked.keep_stacked(models, self.layout)  # (again where the members stepping together changed)
            out, new = self.stacked.forward(models, x, state, lengths)
            yield idx, out, new

    def losses(self, ms: list[Member], batches: list[Batch], states: list) -> tuple:
        """The group's :meth:`rnnlab.train.Group.losses` with the members' losses computed on
        their stacked outputs in one go (:meth:`rnnlab.tasks.Task.member_losses`): one loss
        computation and one backward node for all members, not one per member."""
        parts, order, news = [], [], [None] * len(ms)
        for idx, out, new in self._stacked(ms, batches, states):
            parts.append(self.task.member_losses(out, [batches[i] for i in idx]))
            order += idx
            for i, state in zip(idx, _unstack(new, len(idx))):
                news[i] = state
        loss = parts[0] if len(parts) == 1 else torch.cat(parts)
        if order != sorted(order):  # back into the members' order
            loss = loss[torch.tensor(order).argsort()]
        regs = [m.tr.model.regularization() for m in ms]
        if all(r is None for r in regs):
            return loss, None, loss, news
        reg = torch.stack([loss.new_zeros(()) if r is None else r for r in regs])
        return loss, reg, loss + reg, news

    def evaluate_members(self, ms: list[Member], split: str) -> list[dict]:
        tc = self.cfg.train
        return self.stacked.evaluate(
            [m.tr.model for m in ms],
            self.task,
            split,
            tc.eval_batch_size,
            tc.eval_max_batches,
            self.precision,
            self.device,
        )

    def report(self, ms: list[Member], why: str) -> None:
        """Off a terminal: one line for the ensemble per evaluation (and about every
        :data:`PROGRESS_EVERY_S` seconds between them)."""
        now = time.perf_counter()
        if not self.lines or (why != "eval" and now - self.last_line < PROGRESS_EVERY_S):
            return
        self.last_line = now
        alive = [m for m in self.members if m.training]
        step = max((m.run.prog.step for m in ms), default=0)
        parts = [f"{self.cfg.name} x{self.size}: step {step}/{self.cfg.train.steps}", f"{len(alive)} training"]
        done = sum(m.status in ("trained", "resumed", "done") for m in self.members)
        failed = sum(m.status == "failed" for m in self.members)
        parts += [f"{done} finished"] + ([f"{failed} failed"] if failed else [])
        select = ms[0].run.select if ms else ""
        values = [m.run.last_eval.get(select) for m in ms if m.run.last_eval.get(select) is not None]
        if why == "eval" and values:
            parts.append(f"{select} median {statistics.median(values):.4g} [{min(values):.4g} - {max(values):.4g}]")
        show_progress(log, "  ".join(parts))


@contextlib.contextmanager
def signals_between_steps():
    """While inside, every signal with a Python handler (Ctrl-C's KeyboardInterrupt, the stop
    signals a process pool installs in its workers) is held back, and the yielded function
    runs the held handlers: the ensemble calls it between its batched steps.

    A KeyboardInterrupt raised inside ``torch.func.vmap`` leaves functorch's layer stack
    broken: its clean-up fails with an internal assertion (``!dynamicLayerStack.empty()``)
    that replaces the interrupt, and the process ended as a crash (exit 1) instead of an
    interrupted run (exit 130). A second Ctrl-C while the first is held raises at once, for a
    step that takes too long. Only in the main thread (elsewhere Python runs no handler); the
    old handlers come back on the way out, and one still held then runs after them, unless an
    exception is already on its way."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    held: list[tuple[int, object]] = []
    old: dict[int, Callable] = {}

    def hold(signum, frame) -> None:
        if signum == signal.SIGINT and any(s == signum for s, _ in held):
            old[signum](signum, frame)  # pressed twice: now
            return
        held.append((signum, frame))

    def run_held() -> None:
        while held:
            signum, frame = held.pop(0)
            old[signum](signum, frame)

    for s in signal.valid_signals():
        h = signal.getsignal(s)
        if callable(h):
            old[s] = h
            signal.signal(s, hold)
    try:
        yield run_held
    except BaseException:
        held.clear()
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    run_held()


# ---------------------------------------------------------------------------- starting members


def _claim_and_check(m: Member, resume) -> None:
    """Take the member's lock and decide how it starts (``resume``: True, False or ``"auto"``:
    a finished run of this configuration is done, one with a checkpoint resumes)."""
    check_run_dir(m.root)
    lock = claim(m.root)
    try:
        lock.__enter__()
    except RunLocked as e:
        m.status, m.exc, m.error = "busy", e, str(e)
        return
    m.lock = lock
    try:
        files = RunFiles(m.root)
        mode = start_mode(files, m.cfg, resume)
        if isinstance(mode, dict):  # a finished run of this configuration
            m.status, m.result = "done", mode
            m.release()
            return
        m.resume = mode
        check_start(files, m.cfg, m.resume)
    except Exception as e:
        m.failed(e)
        m.release()


def _prepare(m: Member, task: Task, data_dir: str | None, device: torch.device, provenance: dict) -> None:
    try:
        m.run, m.tr = prepare(m.cfg, RunFiles(m.root), m.resume, data_dir, task, device, provenance)
        m.rng = torch.get_rng_state()  # after the model's initialisation (or the checkpoint's): as the single run
        open_log(m.run, False)
        m.status = "training"
    except Exception as e:
        m.failed(e)
        m.release()


def _start(
    members: list[Member], resume, task: Task, data_dir, strict: bool, on_start=None, checks: bool = True
) -> torch.device:
    """The checks of an ensemble (``checks``), then each member's lock, start mode and
    preparation; returns the device. ``strict``: a member that cannot start raises its error
    before any member is prepared (or, failing its preparation, before the next is)."""
    cfg = members[0].cfg
    if checks:
        check_ensemble([m.cfg for m in members], task)
    device = dev.resolve(cfg.train.device, cfg.train.precision)  # before anything is written
    if checks:
        check_members_fit(cfg, len(members), task, device)
        check_ensemble_precision(cfg, task, device)
    for m in members:
        _claim_and_check(m, resume)
    if strict:
        bad = next((m for m in members if m.status in ("failed", "busy")), None)
        if bad is not None:
            raise bad.exc
    provenance = {"git": git_state(), "source_sha256": source_hash()}  # one code for every member
    for m in members:
        if m.status == "pending":
            _prepare(m, task, data_dir, device, provenance)
            if strict and m.status == "failed":
                raise m.exc
            if m.training and on_start is not None:
                on_start(m)
    return device


def _members(
    cfg: RunConfig,
    seeds: Sequence[int],
    out,
    lrs: Sequence[float] | None = None,
    settings: Sequence[dict] | None = None,
) -> list[Member]:
    if not len(seeds):
        raise ConfigError(f"an ensemble needs at least one seed, got seeds={list(seeds)!r} (e.g. seeds=[0, 1, 2])")
    cfgs = member_configs(cfg, seeds, lrs, settings)
    keys = _own_keys(lrs, settings)
    if isinstance(out, (str, Path)):
        # with members' own settings: out/<setting>/seed<k> (out/lr<rate>/seed<k> for rates), one
        # folder per setting as a grid of single runs
        dirs = [Path(out) / (_folder(c, keys) if keys else "") / f"seed{c.train.seed}" for c in cfgs]
    else:
        dirs = [Path(d) for d in out]
        if len(dirs) != len(cfgs):
            raise ConfigError(f"{len(cfgs)} members but {len(dirs)} run directories; give one directory per member")
    if len(set(map(str, dirs))) != len(dirs):
        raise ConfigError(f"two members of the ensemble would share a run directory: {[str(d) for d in dirs]}")
    return [Member(c.train.seed, c, d) for c, d in zip(cfgs, dirs)]


def _own_keys(lrs, settings) -> list[str]:
    """The keys members set for themselves (``lrs``: the rate; ``settings``: its tables' keys)."""
    if lrs is not None:
        return ["optim.lr"]
    return list(settings[0]) if settings else []


def run_members(
    members: list[Member],
    resume="auto",
    progress: bool | None = None,
    data_dir: str | None = None,
    task: Task | None = None,
    on_eval: Callable | None = None,
    strict: bool = False,
    on_start: Callable | None = None,
    stop: Callable[[], bool] | None = None,
) -> list[Member]:
    """Train ``members`` (one configuration, distinct seeds; see :func:`check_ensemble`) as one
    batched model; every member ends with its ``status`` (and ``error``) set.

    ``resume``: True / False as ``train``'s, or ``"auto"`` (a finished run of this
    configuration is ``done``, one with a checkpoint resumes, a busy one is reported). With
    ``strict``, a member that cannot start raises its error before any member trains (nothing
    is written then). ``on_eval(step, metrics) -> bool`` is called per member after each
    evaluation, as ``train``'s (true: that member stops). ``on_start(member)`` is called for
    each member that starts training. ``stop()`` true after an evaluation (every member has
    just written its checkpoint) raises KeyboardInterrupt there: ``rnnlab suite``'s Ctrl-C."""
    if not members:
        raise ConfigError("an ensemble needs at least one member (e.g. seeds=[0, 1, 2])")
    task = task or build_task(members[0].cfg.task, data_dir)
    try:
        device = _start(members, resume, task, data_dir, strict, on_start)
        training = [m for m in members if m.training]
        if training:
            lines = progress is None and not sys.stderr.isatty()
            ens = Ensemble(training, task, device, on_eval, lines)
            ens.stop = stop
            ens.run(progress)
    finally:
        for m in members:
            if m.training:
                close_run(m.run)
                m.status, m.error = "failed", m.error or "not finished"
            m.release()
    return members


@contextlib.contextmanager
def started(
    cfg: RunConfig, seeds: Sequence[int], out, task: Task | None = None, fast: bool = True, batched: bool = True
):
    """The members of a fresh ensemble, prepared and holding their locks but not trained: the
    group's steps (``step``, ``evaluate``, ``finish`` of the yielded :class:`rnnlab.train.Group`)
    for a caller that times them one by one (``rnnlab bench ensemble``; ``fast=False``: every
    cell's step loop under vmap, :func:`batched_template`; ``batched=False``: one seed as the
    single run trains it, a group of one). The locks are released at the end."""
    if not batched and len(seeds) != 1:
        raise ConfigError(f"an unbatched group is one single run: give one seed, got {list(seeds)}")
    members = _members(cfg, seeds, out)
    task = task or build_task(cfg.task)
    try:
        device = _start(members, False, task, None, strict=True, checks=batched)
        if not batched:
            members[0].rng = None  # the process's random stream is the run's own
            yield Group(members, task, device)
            return
        yield Ensemble(members, task, device, None, False, fast)
    finally:
        for m in members:
            if m.training:
                close_run(m.run)
            m.release()


def train_ensemble(
    cfg: RunConfig,
    seeds: Sequence[int],
    out,
    resume: bool | str = False,
    progress: bool | None = None,
    data_dir: str | None = None,
    task: Task | None = None,
    on_eval: Callable | None = None,
    lrs: Sequence[float] | None = None,
    settings: Sequence[dict] | None = None,
) -> dict:
    """Train the runs of ``cfg`` with each of ``seeds`` as one batched model (see the module
    docstring); returns ``{seed: result}``, each result the dict its ``result.json`` holds.

    ``lrs``: one learning rate per member (``optim.lr``; as long as ``seeds``, see
    :func:`member_configs`): member k is the single run of seed ``seeds[k]`` at ``lrs[k]``, its
    directory ``out/lr<rate>/seed<k>``, and the result is ``{(rate, seed): result}``.
    ``settings``: one table of own settings per member, the general form of ``lrs`` (keys of
    :data:`MEMBER_KEYS`: rates, ``optim.clip``, the LT-RNN's init scales; see
    :func:`member_configs`): member k is the single run of seed ``seeds[k]`` with ``settings[k]``
    set, its directory ``out/<key><value>-.../seed<k>`` (``clip1-input_scale0.5``), and the result
    is ``{(value, ..., seed): result}``, the values in the order of the tables' keys.

    ``out``: a directory (member k in ``out/seed<k>``) or one run directory per seed (``rnnlab
    train --seeds ... --ensemble`` passes the directories ``--seeds`` alone would use).
    ``resume`` as ``train``'s, for every member, or ``"auto"``: a member already finished
    with this configuration is not trained again (its ``result.json`` is returned), one with a
    checkpoint resumes, the others start. A member that cannot start (``RunExists``,
    ``RunLocked``, ...) raises before anything trains; members that fail while training
    (diverged) are stopped with their last good checkpoint while the others go on, and
    :class:`EnsembleFailed` is raised at the end.

    >>> from rnnlab import config
    >>> cfg = config.load("demo/lstm", ["train.steps=2", "train.eval_every=2", "task.L=4",
    ...                                 "task.val_size=8", "task.test_size=8"])
    >>> import tempfile; out = tempfile.mkdtemp()
    >>> results = train_ensemble(cfg, [0, 1, 2], out, progress=False)
    >>> sorted(results), results[2]["steps"], results[2]["conditions"]["ensemble"]
    ([0, 1, 2], 2, 3)
    """
    with caller_state_kept():  # the members set train.threads and seed: the caller's come back
        members = run_members(
            _members(cfg, seeds, out, lrs, settings), resume, progress, data_dir, task, on_eval, strict=True
        )
    own = _own_keys(lrs, settings)
    key = (lambda m: m.seed) if not own else (lambda m: (*(_get(m.cfg, k) for k in own), m.seed))  # noqa: E731
    results = {key(m): m.result for m in members if m.result is not None}
    errors = {key(m): m.exc or RuntimeError(m.error) for m in members if m.status in ("failed", "busy")}
    if errors:
        bad = [(label, m) for label, m in zip(member_labels(members), members) if key(m) in errors]
        lines = "; ".join(f"{label}: {m.error}" for label, m in bad)
        raise EnsembleFailed(
            f"{len(errors)} of {len(members)} members failed ({lines}); the others finished", results, errors
        )
    return results


def main_train(
    runs: list[tuple[RunConfig, Path]],
    resume: bool,
    progress: bool | None,
    data_dir: str | None,
    print_result: Callable,
) -> int:
    """``rnnlab train ... --ensemble``: ``runs`` are the (configuration, run directory) pairs
    ``--seeds`` alone would train one after the other; prints each finished member's result.
    With ``--resume`` every member continues where it is (finished, checkpointed or not
    started: an ensemble killed before some members' first checkpoint continues too)."""
    cfgs = [c for c, _ in runs]
    seeds = [c.train.seed for c in cfgs]
    if member_configs(cfgs[0], seeds) != cfgs:  # what --seeds resolves is what the ensemble trains
        check_ensemble(cfgs)
    # a first line at once: building many members (and their data streams) takes a while
    show_progress(
        log, f"ensemble {cfgs[0].name} x{len(cfgs)}: checking that the members fit in memory, then building them"
    )
    try:
        results = train_ensemble(cfgs[0], seeds, [d for _, d in runs], "auto" if resume else False, progress, data_dir)
    except EnsembleFailed as e:
        for seed in sorted(e.results):
            print_result(e.results[seed])
        raise
    for seed in seeds:
        print_result(results[seed])
    return 0
