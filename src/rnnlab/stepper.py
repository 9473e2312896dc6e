"""The trainer's update step for your own training loop.

The papers' models need more than ``optimizer.step()``: per-tag learning rates (the orthogonal
matrices of expRNN/asRNN/nnRNN learn slower, DMU's memory module at ``lr / (2 n)``), the cells'
extra loss terms (nnRNN's eigenvalue-modulus penalty, :meth:`rnnlab.cells.Cell.regularization`)
and the post-step hooks (dynamic trivialization re-bases the orthogonal maps every K steps,
:func:`rnnlab.parametrize.after_optimizer_step`). :class:`Stepper` does all of it in one call,
exactly as ``rnnlab train`` does (tested: the same parameters after N steps):

>>> import torch, rnnlab
>>> layer = rnnlab.NNRNN(3, 8, batch_first=True)   # or any module holding rnnlab layers or cells
>>> stepper = rnnlab.Stepper(layer, lr=1e-3, group_lr={"orthogonal": 1e-4})
>>> sorted(stepper.groups)
['default', 'nonnormal', 'orthogonal']
>>> out, _ = layer(torch.randn(4, 5, 3))
>>> info = stepper.step(out.square().mean())   # + regularization, backward, clip, step, hooks
>>> sorted(info)
['grad_norm', 'loss', 'reg']
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from . import parametrize as par
from .cells.base import Cell, iter_cells
from .config import OptimConfig

#: the trainer's logger: build_optimizer's notes keep the name they always had ("rnnlab.train")
log = logging.getLogger("rnnlab.train")

__all__ = ["Stepper", "build_optimizer", "regularization"]


class _Tagged(nn.Module):
    """``param_groups`` / ``group_scales`` / ``regularization`` for any module, read off the rnnlab
    cells inside it (parameters outside every cell are "default")."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.inner = module

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        groups: dict[str, list[nn.Parameter]] = {}
        seen: set[int] = set()
        for cell in iter_cells(self.inner):
            for tag, ps in cell.param_groups().items():
                for p in ps:
                    if id(p) not in seen:
                        seen.add(id(p))
                        groups.setdefault(tag, []).append(p)
        rest = [p for p in self.inner.parameters() if id(p) not in seen]
        if rest:
            groups.setdefault("default", []).extend(rest)
        return groups

    def group_scales(self) -> dict[str, float]:
        scales: dict[str, float] = {}
        for cell in iter_cells(self.inner):
            scales.update(cell.group_scales())
        return scales


def regularization(model: nn.Module) -> Tensor | None:
    """The sum of the extra loss terms the model's cells ask for (None when none does): the
    model's own ``regularization()`` when it has one (rnnlab's models and layers), else the
    cells' found inside it."""
    if hasattr(model, "regularization") and not isinstance(model, Cell):
        return model.regularization()
    terms = [r for r in (c.regularization() for c in iter_cells(model)) if r is not None]
    return sum(terms) if terms else None


def build_optimizer(cfg: OptimConfig, model: nn.Module) -> tuple[torch.optim.Optimizer, dict]:
    """One parameter group per tag of ``model.param_groups()``; ``group_lr`` and
    ``group_weight_decay`` override ``lr`` and ``weight_decay`` per tag. A tag the model
    scales (``model.group_scales()``, e.g. DMU's 1 / (2 n)) gets ``lr * scale`` and
    ``weight_decay * scale`` unless named explicitly."""
    tagged = model.param_groups()
    scales = model.group_scales()
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
        log.warning(
            f"parameter group(s) {unused} named in [optim] do not exist in this model "
            f"(its groups: {sorted(summary)}); ignored"
        )
    if cfg.name == "rmsprop":
        opt = torch.optim.RMSprop(groups, lr=cfg.lr, alpha=cfg.alpha, eps=cfg.eps, momentum=cfg.momentum)
    elif cfg.name == "adam":
        opt = torch.optim.Adam(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    else:
        opt = torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return opt, summary


def _grads_finite(params: list) -> bool:
    return all(bool(torch.isfinite(p.grad).all()) for p in params if p.grad is not None)


class Stepper:
    """One training step as ``rnnlab train`` takes it, for a loop of your own.

    ``Stepper(model, optim=None, **options)``: ``model`` is any module holding rnnlab cells or
    layers (or an rnnlab model); ``optim`` an :class:`rnnlab.config.OptimConfig`, a preset name
    or TOML path whose ``[optim]`` section to use (``"nnrnn/copy"``), or None (the defaults);
    ``options`` override its fields (``lr``, ``name`` = "rmsprop" | "adam" | "sgd", ``alpha``,
    ``momentum``, ``eps``, ``beta1``, ``beta2``, ``weight_decay``, ``clip`` (0: none),
    ``group_lr`` and ``group_weight_decay``: per-tag values, e.g. ``{"orthogonal": 1e-4}``).

    The parameter groups are the cells' tags (``stepper.groups``: lr, weight decay and size of
    each); a tag the cells scale (DMU: 1 / (2 n)) gets ``lr * scale`` unless named in
    ``group_lr``. :meth:`step` adds the cells' regularization to ``loss``, zeroes the gradients,
    back-propagates, clips the global gradient norm at ``clip``, steps the optimizer and runs
    the cells' post-step hooks; ``stepper.optimizer`` is the torch optimizer (for schedulers).

    ``scaler``: a ``torch.amp.GradScaler`` (fp16), or None. The trainer and the ensemble take
    every update through the steps below (:meth:`backward`, :meth:`clip_and_step` or
    :meth:`check_norm` after a stacked step, :meth:`after_step`); :meth:`step` is them in a row.
    """

    def __init__(self, model: nn.Module, optim: OptimConfig | str | None = None, *, scaler=None, **options):
        if optim is None:
            cfg = OptimConfig()
        elif isinstance(optim, OptimConfig):
            cfg = optim
        elif isinstance(optim, str):
            from .config import load

            cfg = load(optim).optim
        else:
            raise TypeError(f"optim must be an OptimConfig, a preset name or None, got {type(optim).__name__}")
        fields = {f.name for f in dataclasses.fields(OptimConfig)}
        unknown = sorted(set(options) - fields)
        if unknown:
            raise TypeError(f"unknown Stepper option(s) {unknown}; the [optim] keys are {sorted(fields)}")
        self.config = dataclasses.replace(cfg, **options)
        from .config import ConfigError, RunConfig, _check_ranges

        try:
            _check_ranges(RunConfig(optim=self.config))
        except ConfigError as e:
            raise ValueError(f"Stepper: {e}") from None
        self.model = model
        grouped = model if hasattr(model, "param_groups") else _Tagged(model)
        self.optimizer, self.groups = build_optimizer(self.config, grouped)
        self.params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.scaler = scaler
        self._post_step_work: bool | None = None  # read at the first after_step

    def regularization(self) -> Tensor | None:
        """The cells' extra loss terms now (see :func:`regularization`)."""
        return regularization(self.model)

    # --- the update, step by step ------------------------------------------------------
    def scaled(self, total: Tensor) -> Tensor:
        """What ``backward()`` is called on: ``total``, scaled by the fp16 gradient scaler if any."""
        return total if self.scaler is None else self.scaler.scale(total)

    def backward(self, total: Tensor) -> None:
        """Zero the gradients and back-propagate ``total`` (scaled under fp16)."""
        self.optimizer.zero_grad(set_to_none=True)
        self.scaled(total).backward()

    def clip_and_step(self, on_overflow: Callable[[float], None] | None = None):
        """Clipping at ``clip`` (the gradient norm before clipping is returned, None without
        clipping) and the optimizer step; under fp16 the gradients are unscaled before clipping
        and overflowing steps skipped (the scaler's rule). Without a scaler, :meth:`check_norm`
        runs between clipping and the step."""
        clip = self.config.clip
        if self.scaler is None:
            gnorm = nn.utils.clip_grad_norm_(self.params, clip) if clip > 0 else None
            self.check_norm(gnorm, on_overflow)
            self.optimizer.step()
        else:
            self.scaler.unscale_(self.optimizer)
            gnorm = nn.utils.clip_grad_norm_(self.params, clip) if clip > 0 else None
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return gnorm

    def check_norm(self, gnorm, on_overflow: Callable[[float], None] | None = None):
        """The overflow stop: finite gradients whose norm is not finite (clipping would scale
        every update to zero) call ``on_overflow(norm)``, which is to raise (the trainer stops
        the run as diverged); non-finite gradients make non-finite weights, which the trainer's
        weight check stops. Returns ``gnorm``."""
        if on_overflow is not None and gnorm is not None and not math.isfinite(gnorm) and _grads_finite(self.params):
            on_overflow(float(gnorm))
        return gnorm

    def after_step(self) -> None:
        """The cells' post-step hooks (:func:`rnnlab.parametrize.after_optimizer_step`). Whether
        the model has any is read from its modules at the first step (a model without any,
        most of them, then skips the two walks over its modules per step)."""
        if self._post_step_work is None:
            self._post_step_work = par.has_post_step_work(self.model)
        if self._post_step_work:
            par.after_optimizer_step(self.model)

    def update(self, on_overflow: Callable[[float], None] | None = None):
        """After the backward pass: :meth:`clip_and_step`, then :meth:`after_step`; returns
        the gradient norm before clipping (None without clipping)."""
        gnorm = self.clip_and_step(on_overflow)
        self.after_step()
        return gnorm

    def step(self, loss: Tensor) -> dict:
        """``loss + regularization`` backward, clip, optimizer step, post-step hooks; returns
        ``{"loss", "reg", "grad_norm"}`` as floats (None where there is none)."""
        reg = self.regularization()
        total = loss if reg is None else loss + reg
        self.backward(total)
        gnorm = self.update()
        return {
            "loss": float(loss.detach()),
            "reg": None if reg is None else float(reg.detach()),
            "grad_norm": None if gnorm is None else float(gnorm),
        }
