"""The optimizer step of many members at once (an ensemble, :mod:`rnnlab.ensemble`).

Each member of an ensemble keeps its own ``torch.optim`` optimizer: its state is what its
checkpoint saves and what a resume (or a single run) continues from. Stepping 51 of them one by
one costs 51 times a dozen small operations per parameter; :class:`StackedStep` does the same
update for all members in a few operations per parameter group: the members' parameters,
gradients and optimizer states are gathered into one (members, elements) tensor per group, the
update runs once with each member's own learning rate, and the results are written back into
each member's own tensors (so every file a member writes is the single run's).

Covered: Adam (with L2 weight decay), RMSprop without momentum and not centred, and SGD without
momentum, each with per-member and per-group learning rates (DMU's group rates, schedules that
change one member's rate), and clipping by each member's own gradient norm
(``torch.nn.utils.clip_grad_norm_``'s rule). Anything else (AMSGrad, momentum, a gradient
scaler, a parameter without a gradient) returns None from :meth:`StackedStep.build` or
:meth:`StackedStep.step`, and the ensemble steps its members one by one, as before.

The update is the optimizer's own formula in the same order of operations; members agree with
their single runs to rounding (1e-9 in float64 over 50 steps, tests/test_ensemble.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["StackedStep"]

_ADAM_OFF = ("amsgrad", "maximize", "capturable", "differentiable", "fused", "decoupled_weight_decay")


def _supported(opt: torch.optim.Optimizer) -> bool:
    d = opt.defaults
    if type(opt) is torch.optim.Adam:
        return not any(d.get(k) for k in _ADAM_OFF)
    if type(opt) is torch.optim.RMSprop:
        return not (d.get("centered") or d.get("momentum") or d.get("maximize") or d.get("capturable"))
    if type(opt) is torch.optim.SGD:
        return not (d.get("momentum") or d.get("nesterov") or d.get("maximize"))
    return False


def _shapes(opt: torch.optim.Optimizer) -> list:
    keys = ("weight_decay", "betas", "eps", "alpha")
    return [([tuple(p.shape) for p in g["params"]], [g.get(k) for k in keys]) for g in opt.param_groups]


class StackedStep:
    """One optimizer step for the optimizers of many members (see the module docstring)."""

    def __init__(self, kind: type):
        self.kind = kind
        # flat views of the members' parameters and optimizer states, which live across steps:
        # {key: (the tensors, their data pointers, their flat views, their sizes)}
        self._views: dict[tuple, tuple[list[Tensor], list[int], list[Tensor], list[int]]] = {}

    @classmethod
    def build(cls, opts: Sequence[torch.optim.Optimizer]) -> StackedStep | None:
        """A stacked step for these optimizers (one class and configuration, parameters of the
        same shapes), or None where it does not apply."""
        if not opts or not all(type(o) is type(opts[0]) and _supported(o) for o in opts):
            return None
        first = _shapes(opts[0])
        if any(_shapes(o) != first for o in opts[1:]):
            return None
        return cls(type(opts[0]))

    def step(self, opts: Sequence[torch.optim.Optimizer], params: Sequence[list[Tensor]], clip: float):
        """Clip each member's gradients to norm ``clip`` (0: no clipping) and step every
        optimizer; returns each member's gradient norm before clipping (each None without
        clipping), or None (nothing done) when a parameter has no gradient."""
        if any(p.grad is None for ps in params for p in ps):
            return None
        K = len(opts)
        with torch.no_grad():
            grads = [self._grads(opts, g) for g in range(len(opts[0].param_groups))]
            norms = None
            if clip > 0:
                # each member's norm exactly as torch.nn.utils.clip_grad_norm_ computes it (the norm
                # of the per-parameter norms, in the member's parameter order): the logged norm and
                # the clipping are then the same whether members step together or, as after a
                # resume from checkpoints of different steps, alone
                norms = torch.stack([torch.nn.utils.get_total_norm([p.grad for p in ps], 2.0) for ps in params])
                coef = (clip / (norms + 1e-6)).clamp(max=1.0)
                grads = [G * coef.to(G.dtype).unsqueeze(1) for G in grads]
            for g, G in enumerate(grads):
                self._group(opts, g, G, K)
        for o in opts:  # what a scheduler's wrapper of opt.step records (else it warns of a skipped step)
            o._opt_called = True
        return [None] * K if norms is None else list(norms.unbind(0))

    # ------------------------------------------------------------------------------------
    @staticmethod
    def _rows(ts: list[Tensor], K: int, flat: list[Tensor] | None = None) -> Tensor:
        """(K, elements): the K members' tensors ``ts``, in member order, one row each (``flat``:
        their flat views, where kept)."""
        return torch.cat(flat if flat is not None else [t.reshape(-1) for t in ts]).view(K, -1)

    def _grads(self, opts, g: int) -> Tensor:
        """(K, elements) of the members' gradients of group ``g`` (new tensors at every step)."""
        return self._rows([p.grad for o in opts for p in o.param_groups[g]["params"]], len(opts))

    def _flat_views(self, key: tuple, ts: list[Tensor]) -> tuple[list[Tensor], list[int]] | None:
        """Each tensor of ``ts`` as a flat view, and their sizes; kept while ``ts`` are the same
        tensors on the same memory (a resume's load or a ``p.data =`` makes new ones, and the
        views follow), or None for a tensor that is not contiguous (no flat view of it)."""
        ptrs = [t.data_ptr() for t in ts]
        hit = self._views.get(key)
        if hit is not None and hit[1] == ptrs and all(a is b for a, b in zip(hit[0], ts)):
            return hit[2], hit[3]
        if not all(t.is_contiguous() for t in ts):
            self._views.pop(key, None)
            return None
        views, sizes = [t.view(-1) for t in ts], [t.numel() for t in ts]
        self._views[key] = (list(ts), ptrs, views, sizes)
        return views, sizes

    def _stack(self, key: tuple, ts: list[Tensor], K: int) -> Tensor:
        """The (K, elements) stack of ``ts`` (K members' tensors in member order)."""
        views = self._flat_views(key, ts)
        return self._rows(ts, K, None if views is None else views[0])

    def _write(self, key: tuple, targets: list[Tensor], flat: Tensor) -> None:
        """Copy the rows of ``flat`` back into ``targets`` (the tensors :meth:`_stack` stacked)."""
        views = self._flat_views(key, targets)
        if views is not None:
            torch._foreach_copy_(views[0], list(flat.reshape(-1).split(views[1])))
            return
        sizes = [t.numel() for t in targets]
        parts = flat.reshape(-1).split(sizes)
        torch._foreach_copy_(list(targets), [f.view(t.shape) for f, t in zip(parts, targets)])

    def _state(self, opts, g: int, name: str, init) -> tuple[list[Tensor], Tensor]:
        """The members' state tensors ``name`` of group ``g`` (created as torch creates them on a
        first step) and their (K, elements) stack."""
        ts = []
        for o in opts:
            for p in o.param_groups[g]["params"]:
                st = o.state[p]
                if name not in st:
                    st[name] = init(p)
                ts.append(st[name])
        return ts, self._stack((g, name), ts, len(opts))

    def _steps(self, opts, g: int) -> list[float]:
        """Advance each member's step counts of group ``g``; each member's new count."""
        from torch.optim.optimizer import _get_scalar_dtype

        counts = []
        for o in opts:
            for p in o.param_groups[g]["params"]:
                if "step" not in o.state[p]:
                    o.state[p]["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype())
                counts.append(o.state[p]["step"])
        torch._foreach_add_(counts, 1)
        per = len(opts[0].param_groups[g]["params"])
        return [float(counts[k * per]) for k in range(len(opts))]

    def _group(self, opts, g: int, G: Tensor, K: int) -> None:
        group = opts[0].param_groups[g]
        ps = [p for o in opts for p in o.param_groups[g]["params"]]
        P = self._stack((g, "param"), ps, K)
        lrs = [float(o.param_groups[g]["lr"]) for o in opts]
        wd = group["weight_decay"]
        if wd != 0:
            G = G.add(P, alpha=wd)
        col = lambda xs: torch.tensor(xs, dtype=P.dtype).unsqueeze(1)  # noqa: E731 - per member

        if self.kind is torch.optim.SGD:
            P.add_(G * col([-lr for lr in lrs]))
            self._write((g, "param"), ps, P)
            return
        steps = self._steps(opts, g)
        zeros = lambda p: torch.zeros_like(p, memory_format=torch.preserve_format)  # noqa: E731
        if self.kind is torch.optim.RMSprop:
            vs, V = self._state(opts, g, "square_avg", zeros)
            alpha = group["alpha"]
            V.mul_(alpha).addcmul_(G, G, value=1 - alpha)
            avg = V.sqrt().add_(group["eps"])
            P.add_(G * col([-lr for lr in lrs]) / avg)
            self._write((g, "square_avg"), vs, V)
        else:  # Adam
            beta1, beta2 = group["betas"]
            ms, M = self._state(opts, g, "exp_avg", zeros)
            vs, V = self._state(opts, g, "exp_avg_sq", zeros)
            M.lerp_(G, 1 - beta1)
            V.mul_(beta2).addcmul_(G, G, value=1 - beta2)
            step_size = col([lr / (1 - beta1**s) for lr, s in zip(lrs, steps)])
            bias2 = col([math.sqrt(1 - beta2**s) for s in steps])
            denom = (V.sqrt() / bias2).add_(group["eps"])
            P.add_(M * -step_size / denom)
            self._write((g, "exp_avg"), ms, M)
            self._write((g, "exp_avg_sq"), vs, V)
        self._write((g, "param"), ps, P)
