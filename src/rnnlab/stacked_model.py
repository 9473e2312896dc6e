"""An ensemble's batched model: E models of one architecture run as one, ``torch.func.vmap``
of ``functional_call`` over their stacked parameters (:class:`StackedModel`), on a template copy
whose layers run each cell's batched path (:meth:`rnnlab.cells.Cell.batched_sequence`), and
their evaluation in one pass. The ensemble's driver (:mod:`rnnlab.ensemble`) trains with it.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.nn import functional as F
from torch.utils._pytree import tree_map

from . import device as dev
from .cells.base import as_lengths, check_lengths, iter_cells
from .cells.layers import Recurrent
from .evaluation import add_metric_sums, eval_data, split_metrics
from .kernels import direct as direct_kernels
from .kernels import ensemble as ensemble_kernels
from .kernels.amp import autocasting, low_precision_autocast
from .kernels.state import map_state
from .tasks.base import Task, max_steps

__all__ = ["AUTOCAST_PRODUCTS", "EVAL_ELEMENTS", "StackedModel", "batched_template", "eval_chunk"]

#: the evaluation of several members runs in chunks of at most this many activation elements
#: (batch x time x the widths of the recurrent layers and the readout, per member)
EVAL_ELEMENTS = 2**26
#: whether a covered model's forward runs directly on the stacks, outside vmap
#: (:meth:`StackedModel.direct_plan`); False: always the vmap path (the path before)
DIRECT = True
# LONE_MEMBER: a batched call of one member runs as two, the member beside a detached copy of
# itself whose outputs are dropped. Some of the batched products take another kernel for a
# batch of one (measured, torch 2.13 CPU: a demo/lstm member's weight gradients then differed
# at the last float32 bit from the same member stepped among others, while E = 2 and E = 3
# agree bit for bit). A member steps alone when it catches up after a resume from checkpoints
# of different steps (a kill between two members' checkpoint writes) or ends an evaluation
# chunk; it must compute what it would have among the others, so that a resumed ensemble is
# bit-identical to the uninterrupted one.


def direct_cells() -> tuple:
    """The cell classes whose own batched path the direct forward covers (:func:`_direct_runner`)."""
    from .cells.classic import GRUCell, LSTMCell, RNNCell
    from .cells.dmu import DMUCell, RHNCell

    return (RNNCell, LSTMCell, GRUCell, RHNCell, DMUCell)


def direct_summary() -> str:
    """Which ensembles run their forward outside ``vmap``, in one line (``rnnlab doctor
    --dispatch`` prints it under the dispatch table; :meth:`StackedModel.last_path` says what a
    given forward ran)."""
    state = "" if DIRECT else " [off: rnnlab.stacked_model.DIRECT is False, every ensemble runs under vmap]"
    return (
        "ensembles' forward (rnnlab.stacked_model.StackedModel.direct_plan): directly on the members' "
        "stacked parameters (rnnlab.kernels.direct) for a SequenceModel with no or a one-hot encoder, "
        f"a unidirectional recurrent block of {', '.join(c.__name__ for c in direct_cells())} cells (IRNN "
        "is the RNN cell) and a linear readout; "
        f"else under torch.func.vmap{state}"
    )


def _direct_runner(cell, path: str | None = None):
    """The runner of :mod:`rnnlab.kernels.direct` for ``cell`` on ``path`` (None: on some path),
    or None: a cell whose class's batched path is not one of the covered classes' own (IRNN is
    the RNN cell with other defaults; a subclass with a batched path of its own is not covered)."""
    for cls in direct_cells():
        own = type(cell).batched_sequence is cls.batched_sequence and type(cell).small_sequence is cls.small_sequence
        if isinstance(cell, cls) and own:
            return direct_kernels.runner(cls.family, path)
    return None


def _parametrized(module: nn.Module) -> bool:
    return any(hasattr(m, "parametrizations") for m in module.modules())


def batched_template(model: nn.Module, fast: bool = True) -> nn.Module:
    """A copy of ``model`` to run under vmap (:class:`StackedModel`): each layer runs its cells'
    batched path, :meth:`rnnlab.cells.Cell.batched_sequence` (the cell's own batched fast path
    where it has one, first the compiled loops of :mod:`rnnlab.kernels.small` where its backend
    chooses them; else its reference step loop; ``fast=False``: every cell its step loop), and
    no layer checkpoints (the same values, more memory)."""
    template = copy.deepcopy(model)
    for m in template.modules():
        if isinstance(m, Recurrent):
            m.members = "batched" if fast else "reference"
            m.checkpoint_chunk = None
    return template


def eval_chunk(model: nn.Module, task: Task, split: str, batch_size: int) -> int:
    """How many members of ``model``'s architecture evaluate ``split`` at once (:data:`EVAL_ELEMENTS`):
    sized by the split's longest sequence (:func:`rnnlab.tasks.base.max_steps`; a batch of variable
    lengths is padded to its longest, and the music tasks' first evaluation batch is their shortest)."""
    first = next(iter(task.eval_batches(split, batch_size)), None)
    if first is None:
        return 1 << 30
    steps = max_steps(task, split, batch_size)
    widths = sum(c.hidden_size for c in iter_cells(model)) + max(task.output_size, 1)
    per_member = first.x.shape[0] * steps * widths * 4  # a few intermediates per unit and step
    return max(1, EVAL_ELEMENTS // max(per_member, 1))


#: products autocast runs in its low precision that, inside ``torch.func.vmap``, run in their
#: inputs' dtype instead (seen with torch 2.13 on the CPU: ``F.linear`` with a bias, ``addmm``;
#: the others are listed as autocast lists them): :class:`_AutocastInVmap` casts for them
AUTOCAST_PRODUCTS = (F.linear, torch.addmm, torch.baddbmm, torch.addbmm, torch.addmv, torch.mm, torch.bmm, torch.matmul)


class _AutocastInVmap(torch.overrides.TorchFunctionMode):
    """Under a bf16/fp16 autocast, the floating inputs of :data:`AUTOCAST_PRODUCTS` cast to
    autocast's dtype before the call, as autocast casts them outside ``vmap``: a member then
    computes each product in the dtype its single run does (docs/ensembles.md). Where autocast
    is off (the recurrences' float32 regions, fp32 runs) nothing changes."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in AUTOCAST_PRODUCTS:
            first = next((a for a in args if isinstance(a, Tensor)), None)
            if first is not None and low_precision_autocast(first):
                dt = torch.get_autocast_dtype(first.device.type)
                cast = lambda a: a.to(dt) if isinstance(a, Tensor) and a.is_floating_point() else a  # noqa: E731
                args = tuple(cast(a) for a in args)
                kwargs = {k: cast(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


class StackedModel:
    """E models of one architecture run as one: ``torch.func.vmap`` of ``functional_call`` over
    their stacked parameters and buffers, on a template copy of the first model
    (:func:`batched_template`: the cells' recurrences step out of vmap into batched loops,
    :mod:`rnnlab.kernels.ensemble`).

    ``forward(models, x, state, lengths, shared=False)``: ``x`` (E, B, T, ...) holds one batch
    per member (``shared=True``: one batch (B, T, ...) for all), ``state`` a stacked state (E,
    ...) or None, ``lengths`` (E, B) (shared: (B,)) or None; returns ``(out (E, ...), state
    (E, ...))``. Gradients flow into each model's own parameters."""

    def __init__(self, model: nn.Module, fast: bool = True):
        self.template = batched_template(model, fast)
        self.names = [n for n, _ in self.template.named_parameters()]
        # the template's modules' names (a cell's: its parameters' prefix), by module
        self._module_names = {id(c): n for n, c in self.template.named_modules()}
        self.buffer_names = [n for n, _ in self.template.named_buffers()]
        # the kept stacks (keep_stacked): the models, per parameter name the (E, ...) stack whose
        # rows are those models' parameters, the parameters, and their data pointers
        self._kept: tuple | None = None
        #: what the last :meth:`forward` ran: "direct" (:meth:`direct_plan`) or "vmap"
        self.last_path: str | None = None

    def keep_stacked(self, models: Sequence[nn.Module], groups: Sequence[Sequence[int]] | None = None) -> None:
        """Let ``models``' parameters live as the rows of one (E, ...) tensor per parameter
        name, kept between steps: each parameter (the same object, its optimizer state and
        checkpoint entries unchanged) becomes a view of its row (``p.data = stack[k]``). A
        forward pass of these models then reads the stacks as they are, instead of stacking
        every parameter of every member again, and its backward hands each member its rows of
        the stacks' gradients (what the backward of the stacking gave it) instead of running
        one accumulation per member and parameter (an ensemble of 51 small models: 306 of them
        a step). A parameter whose data moves elsewhere (``p.data = ...``) is noticed at the next
        forward pass, which stacks the models' parameters again; the parameter objects
        themselves must stay (as their optimizers hold them). A checkpoint saves each
        parameter's own row (:func:`rnnlab.train.own_memory`), not the stack.

        ``groups`` (the parameters' indices in ``named_parameters`` order, one list per
        optimizer parameter group, in the group's order; each parameter once): the stacks of one
        group are column blocks of one (E, elements) tensor, member k's parameters back to back
        in its row k, and so are their gradients: the layout :class:`rnnlab.stacked_optim.StackedStep`
        updates in place, with no gathering of the members' tensors and no writing back."""
        params = [[p for _, p in m.named_parameters()] for m in models]
        E, first = len(models), params[0]
        layout: list = [None] * len(self.names)  # per parameter: (group, first column), or None
        flats: list[Tensor] = []
        if groups is not None and sorted(j for g in groups for j in g) == list(range(len(self.names))):
            for g in groups:
                kinds = {(first[j].dtype, first[j].device) for j in g}
                if len(kinds) != 1:
                    layout = [None] * len(self.names)
                    flats = []
                    break
                dtype, device = kinds.pop()
                off = 0
                for j in g:
                    layout[j] = (len(flats), off)
                    off += first[j].numel()
                flats.append(torch.empty(E, off, dtype=dtype, device=device))
        stacks = []
        with torch.no_grad():
            for j in range(len(self.names)):
                if layout[j] is None:
                    stack = torch.stack([ps[j] for ps in params])
                else:
                    g, off = layout[j]
                    stack = flats[g][:, off : off + first[j].numel()].view(E, *first[j].shape)
                    stack.copy_(torch.stack([ps[j] for ps in params]))
                for k, ps in enumerate(params):
                    ps[j].data = stack[k]
                stacks.append(stack)
        sizes = [(f.shape[1], f.dtype, f.device) for f in flats]
        self._kept = (list(models), stacks, params, self._pointers(params), layout, sizes, groups)

    @staticmethod
    def _pointers(params) -> list[int]:
        return [p.data_ptr() for ps in params for p in ps]

    def keeps(self, models: Sequence[nn.Module]) -> bool:
        """Whether ``models`` (these objects, in this order) are the ones :meth:`keep_stacked` kept."""
        kept = self._kept[0] if self._kept is not None else []
        return len(kept) == len(models) and all(a is b for a, b in zip(kept, models))

    def _kept_stacks(self, models: Sequence[nn.Module]) -> list[Tensor] | None:
        """The kept stacks of ``models`` (:meth:`keep_stacked`), or None where these are not the
        models kept (another set, another order). Where a parameter has moved off its row (its
        data pointer changed: ``p.data = ...``), the models' parameters are stacked and kept
        again first, from their values now."""
        if not self.keeps(models):
            return None
        _, stacks, params, ptrs, *_, groups = self._kept
        if self._pointers(params) != ptrs:
            self.keep_stacked(models, groups)
            stacks = self._kept[1]
        return stacks

    def tensors(self, models: Sequence[nn.Module]) -> dict[str, Tensor]:
        """The models' parameters and buffers, stacked (parameters differentiably: the
        gradients reach each model's own parameters)."""
        out = {}
        stacks = self._kept_stacks(models)
        if stacks is not None:
            _, _, params, _, layout, sizes, _ = self._kept
            E = len(models)
            grads = None
            if torch.is_grad_enabled():  # the gradients' rows, back to back per group as the parameters'
                grads = [torch.empty(E, n, dtype=dtype, device=device) for n, dtype, device in sizes]
            for j, (n, stack) in enumerate(zip(self.names, stacks)):
                # contiguous, as torch.stack makes it: a column block of a group's stack read in
                # place takes other product kernels (an LSTM member then differed from itself
                # stepped alone at the last float32 bit)
                out[n] = stack.detach().contiguous()
                if grads is not None and any(ps[j].requires_grad for ps in params):
                    out[n].requires_grad_()
                    rows = None
                    if layout[j] is not None:
                        g, off = layout[j]
                        rows = grads[g][:, off : off + stack[0].numel()]
                    out[n].register_hook(self._hand_out(j, rows))
        else:
            params = [dict(m.named_parameters()) for m in models]
            for n in self.names:
                out[n] = torch.stack([p[n] for p in params])
        if self.buffer_names:
            buffers = [dict(m.named_buffers()) for m in models]
            for n in self.buffer_names:
                out[n] = torch.stack([b[n] for b in buffers])
        return out

    def _hand_out(self, j: int, rows: Tensor | None):
        """The hook on a kept stack of parameter ``j``: each member's parameter receives its row
        of the gradient (copied into ``rows``, the (E, elements) columns of its group's gradient,
        where given), through the parameter's own hooks (``register_hook``,
        ``register_post_accumulate_grad_hook``), accumulated as autograd accumulates into it."""
        params = [ps[j] for ps in self._kept[2]]

        def hook(grad: Tensor) -> None:
            if rows is not None:
                rows.copy_(grad.reshape(rows.shape))
                each = rows.view(grad.shape).unbind(0)
            else:
                each = grad.unbind(0)
            for p, g in zip(params, each):
                if not p.requires_grad:
                    continue
                for h in (p._backward_hooks or {}).values():  # the parameter's own hooks, as autograd runs them
                    r = h(g)
                    g = g if r is None else r
                p.grad = g if p.grad is None else p.grad + g
                for h in (getattr(p, "_post_accumulate_grad_hooks", None) or {}).values():
                    h(p)

        return hook

    def forward(
        self,
        models: Sequence[nn.Module],
        x: Tensor,
        state=None,
        lengths: Tensor | None = None,
        shared: bool = False,
        tensors: dict | None = None,
    ):
        data_dim = None if shared else 0
        tensors = tensors or self.tensors(models)
        lone = next(iter(tensors.values())).shape[0] == 1
        if lone:  # LONE_MEMBER: one member runs beside a detached copy of itself
            tensors = {n: torch.cat([t, t.detach()]) for n, t in tensors.items()}
            if not shared:
                x = torch.cat([x, x.detach()])
                lengths = None if lengths is None else torch.cat([lengths, lengths])
            state = None if state is None else tree_map(lambda t: torch.cat([t, t.detach()]), state)

        plan = self.direct_plan(x, state, lengths, shared)
        self.last_path = "direct" if plan is not None else "vmap"
        if plan is not None:
            out = self._direct(plan, tensors, x, state, lengths, shared)
            return tree_map(lambda t: t[:1], out) if lone else out

        def one(p, x, state, lengths):
            return functional_call(self.template, p, (x, state, lengths))  # SequenceModel.forward_batch's call

        in_dims = (0, data_dim, None if state is None else 0, None if lengths is None else data_dim)
        with _AutocastInVmap() if low_precision_autocast(x) else contextlib.nullcontext():
            out = vmap(one, in_dims=in_dims)(tensors, x, state, lengths)
        return tree_map(lambda t: t[:1], out) if lone else out

    def direct_plan(self, x: Tensor, state=None, lengths: Tensor | None = None, shared: bool = False):
        """Whether :meth:`forward` of ``x`` runs directly on the stacked parameters, outside
        ``vmap`` (:meth:`_direct`: the input terms, the recurrence and the readout each one
        batched call over the members), and how: a plan, or None (the ``vmap`` path). The one
        place this is decided; :attr:`last_path` says what the last forward ran.

        Covered: a :class:`rnnlab.model.SequenceModel` (the DMU synthetic presets' shape) whose
        encoder is none or one-hot, with a unidirectional recurrent block whose every cell
        :func:`rnnlab.kernels.direct.runner` covers on its dispatch path (RNN/IRNN, LSTM, GRU,
        RHN, DMU; any number of layers, no dropout between them while training), nothing between
        it and the linear readout (no dropout while training, no pooling, no dense layer), the
        batched cells (not ``fast=False``), no bf16/fp16 autocast, no parametrized weights."""
        from .model import OneHot, SequenceModel

        m = self.template
        if not DIRECT or not isinstance(m, SequenceModel) or low_precision_autocast(x) or autocasting(x.device.type):
            return None
        rnn = m.rnn
        if not isinstance(m.encoder, (nn.Identity, OneHot)) or not isinstance(m.pool, nn.Identity):
            return None
        if not isinstance(m.dense, nn.Identity) or not (isinstance(m.drop, nn.Identity) or not m.training):
            return None
        if not isinstance(m.readout, nn.Linear) or type(rnn).forward is not Recurrent.forward:
            return None
        if rnn.members != "batched" or rnn.num_directions != 1 or not rnn.batch_first or _parametrized(rnn):
            return None
        if rnn.num_layers != len(rnn.cells) or (rnn.dropout > 0 and m.training):
            return None
        member = x if shared else x[0]
        tokens = isinstance(m.encoder, OneHot) and member.dim() == 2 and not member.is_floating_point()
        if isinstance(m.encoder, OneHot) != tokens:
            return None
        if not tokens and (member.dim() != 3 or member.shape[-1] != rnn.input_size):
            return None
        dtype, weight = torch.get_default_dtype() if tokens else member.dtype, next(rnn.parameters(), None)
        if weight is None or dtype != weight.dtype or x.device != weight.device or 0 in member.shape[:2]:
            return None  # (the vmap path says what is wrong, or returns the empty result)
        if any(_direct_runner(cell) is None for cell in rnn.cells):
            return None
        layers, width = [], rnn.input_size
        for cell in rnn.cells:
            # the cell's dispatch path on one member's (T, B, I) input, as Recurrent would ask it
            like = torch.empty((), dtype=dtype, device=x.device).expand(member.shape[1], member.shape[0], width)
            path = cell.path(like, lengths, ensemble=True)
            run = _direct_runner(cell, path)
            if run is None:
                return None
            if (
                not layers
            ):  # one-hot inputs come as their tokens where the layer reads them linearly (SequenceModel._encode)
                ids = (
                    tokens and ensemble_kernels.TOKEN_INPUTS and cell.reads_input_linearly(like, lengths, ensemble=True)
                )
            layers.append((run, path))
            width = cell.hidden_size
        return layers, tokens, ids

    def _direct(self, plan, tensors: dict, x: Tensor, state, lengths: Tensor | None, shared: bool):
        """:meth:`forward` on the plan of :meth:`direct_plan`: the template's ``SequenceModel.forward``
        (encoder, ``Recurrent``'s layers, readout) written on the stacks, every cell call the
        one its batched path makes under ``vmap`` (:mod:`rnnlab.kernels.direct`), so the
        outputs, states and gradients are the vmap path's."""
        layers, tokens, ids = plan
        m = self.template
        rnn = m.rnn
        E = next(iter(tensors.values())).shape[0]
        if shared:
            x = x.expand(E, *x.shape)
            lengths = None if lengths is None else torch.as_tensor(lengths).expand(E, -1)
        B = x.shape[1]
        if lengths is not None:
            lengths = as_lengths(lengths).cpu()  # (the values: the caller checks each member's, as for vmap)
            if lengths.shape != (E, B):
                raise ValueError(
                    f"lengths must hold one length per member and batch element ({E}, {B}), got {tuple(lengths.shape)}"
                )
        if ids:
            stand_in = ensemble_kernels.one_hot_stand_in(x[0], m.encoder.num_tokens, torch.get_default_dtype())
            xt = stand_in.transpose(0, 1).expand(E, *stand_in.transpose(0, 1).shape)
            tokens_in = x
        else:
            if tokens:
                x = m.encoder(x)
            xt = x.transpose(1, 2)  # (E, T, B, I): the time-major view Recurrent hands its cell
        finals = []
        for i, ((run, path), cell) in enumerate(zip(layers, rnn.cells)):
            name = self._module_names[id(cell)]

            def p(local, name=name):
                return tensors[f"{name}.{local}"]

            def inputs(weight, bias, xt=xt, first=i == 0):
                if first and ids:
                    return ensemble_kernels._token_rows(tokens_in, xt, weight, bias)[0]
                return ensemble_kernels._rows_product(xt, weight, bias)[0]

            if state is None:
                zero = cell.init_state(B, device=x.device, dtype=xt.dtype)
                h0 = map_state(lambda t: t.expand(E, *t.shape), zero)  # (as the vmap rule expands it)
            elif rnn._mixed:
                h0 = state[i]  # layers of different widths: a list of per-layer states
            else:
                h0 = map_state(lambda t, i=i: t[:, i], state)  # layer i of each member's stacked state
            with ensemble_kernels.members_first():
                xt, h_n = run(cell, p, inputs, h0, lengths, path)
            finals.append(h_n)
        # as Recurrent stacks them: (E, layers, B, H), or a list of per-layer states (mixed widths)
        h_n = finals if rnn._mixed else map_state(lambda *s: torch.stack(s, 1), *finals)
        out = xt.transpose(1, 2)  # (E, B, T, H): batch-first
        if m.readout_kind == "last":
            if lengths is None:
                out = out[:, :, -1]
            else:
                at = torch.arange(E, device=out.device)[:, None], torch.arange(B, device=out.device)
                out = out[(*at, (lengths - 1).to(out.device))]
        y = ensemble_kernels._rows_product(out, tensors["readout.weight"], tensors.get("readout.bias"))[0]
        return y, h_n

    def evaluate(
        self,
        models: Sequence[nn.Module],
        task: Task,
        split: str,
        batch_size: int,
        max_batches: int,
        precision: str,
        device: torch.device,
    ) -> list[dict]:
        """``rnnlab.train.evaluate`` of every model, in one pass over the split per chunk of
        models (:data:`EVAL_ELEMENTS`)."""
        metrics: list[dict] = []
        chunk = self._eval_chunk(task, split, batch_size)
        for i in range(0, len(models), chunk):
            metrics += self._evaluate(models[i : i + chunk], task, split, batch_size, max_batches, precision, device)
        return metrics

    def _eval_chunk(self, task: Task, split: str, batch_size: int) -> int:
        return eval_chunk(self.template, task, split, batch_size)

    @torch.no_grad()
    def _evaluate(self, models, task, split, batch_size, max_batches, precision, device) -> list[dict]:
        was = self.template.training
        self.template.eval()
        sums: list[dict] = [{} for _ in models]
        carry = None
        try:
            tensors = self.tensors(models)
            for batch in eval_data(task, split, batch_size, max_batches, device):
                if batch.lengths is not None:
                    check_lengths(torch.as_tensor(batch.lengths), batch.x.shape[1], batch.x.shape[0])
                with dev.autocast(device, precision):
                    out, carry = self.forward(
                        models,
                        batch.x,
                        carry if batch.carry_state else None,
                        batch.lengths,
                        shared=True,
                        tensors=tensors,
                    )
                for k in range(len(models)):
                    add_metric_sums(sums[k], task, out[k], batch)
        finally:
            self.template.train(was)
        return [split_metrics(task, m, split, batch_size, s) for m, s in zip(models, sums)]
