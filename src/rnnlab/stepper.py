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

from torch import Tensor, nn

from . import parametrize as par
from .cells.base import Cell, iter_cells
from .config import OptimConfig


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
    """

    def __init__(self, model: nn.Module, optim: OptimConfig | str | None = None, **options):
        from .train import build_optimizer

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

    def regularization(self) -> Tensor | None:
        """The cells' extra loss terms now (see :func:`regularization`)."""
        return regularization(self.model)

    def step(self, loss: Tensor) -> dict:
        """``loss + regularization`` backward, clip, optimizer step, post-step hooks; returns
        ``{"loss", "reg", "grad_norm"}`` as floats (None where there is none)."""
        reg = self.regularization()
        total = loss if reg is None else loss + reg
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        clip = self.config.clip
        gnorm = nn.utils.clip_grad_norm_(self.params, clip) if clip > 0 else None
        self.optimizer.step()
        par.after_optimizer_step(self.model)
        return {
            "loss": float(loss.detach()),
            "reg": None if reg is None else float(reg.detach()),
            "grad_norm": None if gnorm is None else float(gnorm),
        }
