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
change one member's rate), and clipping by each member's own gradient norm at its own threshold
(``torch.nn.utils.clip_grad_norm_``'s rule). Anything else (AMSGrad, momentum, a gradient
scaler, a parameter without a gradient) returns None from :meth:`StackedStep.build` or
:meth:`StackedStep.step`, and the ensemble steps its members one by one, as before.

The update is torch's own: the functional form of the optimizer (``torch.optim.adam.adam``,
``rmsprop.rmsprop``, ``sgd.sgd``) run on the stacks, once per set of members that share a
learning rate; it equals each member's optimizer stepping alone, in float64 bit for bit
(tests/test_stacked_optim.py), and members agree with their single runs to rounding (1e-9 in
float64 over 50 steps, tests/test_ensemble.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.optim.adam import adam as _adam
from torch.optim.optimizer import _get_scalar_dtype
from torch.optim.rmsprop import rmsprop as _rmsprop
from torch.optim.sgd import sgd as _sgd

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
        # the members' state tensors: {(group, name): (their state dicts, the tensors)}
        self._kept: dict[tuple, tuple[list[dict], list[Tensor]]] = {}
        # for _tiled: {key: (the tensors' sizes, element size, byte offsets, elements)}
        self._sizes: dict[tuple, tuple] = {}

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

    def step(self, opts: Sequence[torch.optim.Optimizer], params: Sequence[list[Tensor]], clip):
        """Clip each member's gradients to norm ``clip`` (0: no clipping; a sequence: each
        member's own threshold) and step every optimizer; returns each member's gradient norm
        before clipping (None for a member without clipping), or None (nothing done) when a
        parameter has no gradient."""
        if any(p.grad is None for ps in params for p in ps):
            return None
        K = len(opts)
        clips = [float(c) for c in clip] if isinstance(clip, Sequence) else [float(clip)] * K
        with torch.no_grad():
            grads = [self._grads(opts, g) for g in range(len(opts[0].param_groups))]
            norms = None
            if any(c > 0 for c in clips):
                # each member's norm exactly as torch.nn.utils.clip_grad_norm_ computes it (the norm
                # of the per-parameter norms, in the member's parameter order): the logged norm and
                # the clipping are then the same whether members step together or, as after a
                # resume from checkpoints of different steps, alone
                norms = torch.stack([torch.nn.utils.get_total_norm([p.grad for p in ps], 2.0) for ps in params])
                coef = torch.ones_like(norms)
                for c in dict.fromkeys(clips):  # once per threshold, with clip_grad_norm_'s arithmetic
                    if c > 0:
                        rows = torch.tensor([k for k in range(K) if clips[k] == c])
                        coef[rows] = (c / (norms[rows] + 1e-6)).clamp(max=1.0)
                grads = [G * coef.to(G.dtype).unsqueeze(1) for G in grads]
            for g, G in enumerate(grads):
                self._group(opts, g, G, K)
        for o in opts:  # what a scheduler's wrapper of opt.step records (else it warns of a skipped step)
            o._opt_called = True
        if norms is None:
            return [None] * K
        return [n if c > 0 else None for n, c in zip(norms.unbind(0), clips)]

    # ------------------------------------------------------------------------------------
    @staticmethod
    def _rows(ts: list[Tensor], K: int, flat: list[Tensor] | None = None) -> Tensor:
        """(K, elements): the K members' tensors ``ts``, in member order, one row each (``flat``:
        their flat views, where kept)."""
        return torch.cat(flat if flat is not None else [t.reshape(-1) for t in ts]).view(K, -1)

    def _grads(self, opts, g: int) -> Tensor:
        """(K, elements) of the members' gradients of group ``g`` (new tensors at every step): the
        gradients themselves where they lie back to back in one memory (the kept stacks of
        :meth:`rnnlab.stacked_model.StackedModel.keep_stacked`), else a copy."""
        grads = [p.grad for o in opts for p in o.param_groups[g]["params"]]
        tiled = self._tiled((g, "grad"), grads, len(opts))
        return tiled if tiled is not None else self._rows(grads, len(opts))

    def _tiled(self, key: tuple, ts: list[Tensor], K: int) -> Tensor | None:
        """The (K, elements) tensor whose row k holds member k's tensors of ``ts`` back to back,
        where ``ts`` (K members' tensors in member order) lie so in one memory: a view of that
        memory, whose updates are the members' own. None where they do not."""
        sizes = self._sizes.get(key)
        if sizes is None or len(sizes[0]) != len(ts):
            sizes = ([t.numel() for t in ts], ts[0].element_size())
            steps, at = [], 0
            for n in sizes[0]:
                steps.append(at)
                at += n * sizes[1]
            self._sizes[key] = sizes = (sizes[0], sizes[1], steps, at // sizes[1])
        first, last = ts[0], ts[-1]
        base = first.data_ptr()
        if (
            [t.data_ptr() - base for t in ts] != sizes[2]
            or not all(t.is_contiguous() and t.dtype == first.dtype for t in ts)
            or first.untyped_storage().data_ptr() != last.untyped_storage().data_ptr()
            or sizes[3] % K
        ):
            return None
        n = sizes[3] // K
        return first.detach().as_strided((K, n), (n, 1), first.storage_offset())

    def _flat_views(self, key: tuple, ts: list[Tensor]) -> tuple[list[Tensor], list[int]] | None:
        """Each tensor of ``ts`` as a flat view, and their sizes; kept while ``ts`` are the same
        tensors on the same memory (a resume's load or a ``p.data =`` makes new ones, and the
        views follow; the kept list of a state's tensors is that list itself), or None for a
        tensor that is not contiguous (no flat view of it)."""
        hit = self._views.get(key)
        if hit is not None and hit[0] is ts:  # the kept list of a state's tensors (_members_state)
            return hit[2], hit[3]
        ptrs = [t.data_ptr() for t in ts]
        if hit is not None and hit[1] == ptrs and all(a is b for a, b in zip(hit[0], ts)):
            return hit[2], hit[3]
        if not all(t.is_contiguous() for t in ts):
            self._views.pop(key, None)
            return None
        views, sizes = [t.view(-1) for t in ts], [t.numel() for t in ts]
        self._views[key] = (ts, ptrs, views, sizes)
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

    def _members_state(self, opts, g: int, name: str, init) -> list[Tensor]:
        """The members' state tensors ``name`` of group ``g``, in member order (created as torch
        creates them on a first step, where missing). Kept across steps while every member's
        optimizer keeps its state dict (a resume's ``load_state_dict`` makes a new one, and the
        tensors are gathered again): a step then looks up no member's state one by one."""
        dicts = [o.state for o in opts]
        hit = self._kept.get((g, name))
        if hit is not None and len(hit[0]) == len(dicts) and all(a is b for a, b in zip(hit[0], dicts)):
            return hit[1]
        ts = []
        for o in opts:
            for p in o.param_groups[g]["params"]:
                st = o.state[p]
                if name not in st:
                    st[name] = init(p)
                ts.append(st[name])
        self._kept[(g, name)] = (dicts, ts)
        return ts

    def _state(self, opts, g: int, name: str, init) -> tuple[list[Tensor] | None, Tensor]:
        """The members' state tensors ``name`` of group ``g`` and their (K, elements) stack; the
        tensors are None where the stack is their memory (nothing to write back). Where it is not
        (a first step, a resume's ``load_state_dict``), the members' state tensors become views
        of the stack's rows from here on (:meth:`_adopt`): the state a member's optimizer holds
        and saves is the same values, and later steps update it in place."""
        ts = self._members_state(opts, g, name, init)
        tiled = self._tiled((g, name), ts, len(opts))
        if tiled is not None:
            return None, tiled
        stack = self._stack((g, name), ts, len(opts))
        self._adopt(opts, g, name, ts, stack)
        return None, stack

    def _adopt(self, opts, g: int, name: str, ts: list[Tensor], stack: Tensor) -> None:
        """Each member's state tensor ``name`` of group ``g`` (``ts``, in member order) replaced
        in its optimizer's state by the same values as a view of its place in ``stack``."""
        at, flat = 0, stack.view(-1)
        k = 0
        for o in opts:
            for p in o.param_groups[g]["params"]:
                t = ts[k]
                view = flat[at : at + t.numel()].view(t.shape)
                o.state[p][name] = view
                ts[k] = view  # (the kept list of this state's tensors, _members_state)
                at += t.numel()
                k += 1
        self._views.pop((g, name), None)

    def _steps(self, opts, g: int) -> list[float]:
        """Advance each member's step counts of group ``g``; each member's new count."""
        counts = self._members_state(opts, g, "step", lambda p: torch.tensor(0.0, dtype=_get_scalar_dtype()))
        K = len(opts)
        tiled = self._tiled((g, "step"), counts, K)
        if tiled is None:  # from here on one (K, parameters) tensor of counts: one add a step
            tiled = torch.stack(counts).view(K, -1)
            self._adopt(opts, g, "step", counts, tiled)
        tiled.add_(1)
        return tiled[:, 0].tolist()  # (one read, not one per member)

    def _group(self, opts, g: int, G: Tensor, K: int) -> None:
        """Group ``g`` of every member: torch's own update (its functional form, on the (K,
        elements) stacks), once per set of members that share a learning rate and step count."""
        ps = [p for o in opts for p in o.param_groups[g]["params"]]
        P = self._tiled((g, "param"), ps, K)  # the kept stacks (StackedModel.keep_stacked)
        write = P is None
        if write:
            P = self._stack((g, "param"), ps, K)
        zeros = lambda p: torch.zeros_like(p, memory_format=torch.preserve_format)  # noqa: E731
        states = [self._state(opts, g, name, zeros) for name in _STATES[self.kind]]
        steps = self._steps(opts, g) if _STATES[self.kind] else [0.0] * K
        sets: dict[tuple, list[int]] = {}
        for k, o in enumerate(opts):
            sets.setdefault((float(o.param_groups[g]["lr"]), steps[k]), []).append(k)
        for (lr, step), rows in sets.items():
            if len(rows) == K:  # all members (the usual case): the stacks themselves
                self._torch_step(opts[0].param_groups[g], lr, step, P, G, [S for _, S in states])
                continue
            idx = torch.tensor(rows)
            part = [P[idx], *(S[idx] for _, S in states)]
            self._torch_step(opts[0].param_groups[g], lr, step, part[0], G[idx], part[1:])
            for whole, rows_done in zip([P, *(S for _, S in states)], part):
                whole.index_copy_(0, idx, rows_done)
        if write:
            self._write((g, "param"), ps, P)

    def _torch_step(self, group: dict, lr: float, step: float, P: Tensor, G: Tensor, S: list[Tensor]) -> None:
        """torch's functional update of one (rows, elements) stack, in place: the formula and
        the order of operations its optimizer applies to each member's tensors (exact: the
        stacked update equals each member's own in float64, tests/test_stacked_optim.py)."""
        wd, foreach = group["weight_decay"], group.get("foreach")
        count = [torch.tensor(step - 1, dtype=_get_scalar_dtype())]  # the functional form counts it up
        if self.kind is torch.optim.SGD:
            _sgd(
                [P], [G], [None], foreach=foreach, weight_decay=wd, momentum=0, lr=lr, dampening=0, nesterov=False,
                maximize=False,
            )  # fmt: skip
        elif self.kind is torch.optim.RMSprop:
            _rmsprop(
                [P], [G], S, [], [], count, foreach=foreach, lr=lr, alpha=group["alpha"], eps=group["eps"],
                weight_decay=wd, momentum=0, centered=False,
            )  # fmt: skip
        else:
            beta1, beta2 = group["betas"]
            _adam(
                [P], [G], S[0:1], S[1:2], [], count, foreach=foreach, amsgrad=False, beta1=beta1, beta2=beta2,
                lr=lr, weight_decay=wd, eps=group["eps"], maximize=False,
            )  # fmt: skip


#: the state tensors of each optimizer StackedStep covers, in the order its functional form takes them
_STATES = {torch.optim.SGD: (), torch.optim.RMSprop: ("square_avg",), torch.optim.Adam: ("exp_avg", "exp_avg_sq")}
