"""The cell contract and the reference time loop (the layers over cells: :mod:`rnnlab.cells.layers`).

Conventions (docs/models.md): column form ``h_t = f(W_hh h_{t-1} + W_xh x_t + b)`` with
``weight_hh`` of shape (H, H) applied as ``h @ weight_hh.T``. Sequences inside the library are
time-major ``(T, B, I)``; layers accept ``batch_first`` like ``torch.nn.RNN``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize as P

from ..kernels import dispatch
from ..kernels.amp import autocasting
from ..kernels.ensemble import batched
from ..kernels.state import State, map_state

__all__ = ["BACKENDS", "Cell", "State", "batched_path", "check_lengths", "iter_cells", "unroll"]

BACKENDS = ("auto", "reference")


def _tracing() -> bool:
    """Whether torch.jit.trace, torch.export or torch.compile is tracing this call."""
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return torch.jit.is_tracing() or bool(compiling and compiling())


def _capturing() -> bool:
    """Whether torch.jit.trace or torch.export is capturing this call: the layers then run the
    step loop (:func:`unroll`), which both capture, instead of the fast paths (custom autograd
    Functions with in-place ``out=`` kernels, data-dependent precision checks), which neither
    captures. torch.compile is not capturing in this sense: it runs the fast paths (graph
    breaks around them), forward and backward."""
    exporting = getattr(getattr(torch, "compiler", None), "is_exporting", None)
    return torch.jit.is_tracing() or bool(exporting and exporting())


def check_lengths(lengths: Tensor, T: int, B: int) -> None:
    """``lengths`` must hold one length in [1, T] per batch element. Inside ``torch.func.vmap``
    (an ensemble of models, :mod:`rnnlab.ensemble`) the values cannot be read: the caller checks
    each member's lengths before."""
    if not batched(lengths):
        as_lengths(lengths)  # whole numbers (a float length would be cut short by a cast)
    if lengths.shape != (B,):
        got = tuple(lengths.shape) if batched(lengths) else lengths.tolist()
        raise ValueError(f"lengths must hold one length in [1, {T}] per batch element ({B}), got {got}")
    if _capturing():  # torch.export: the values are symbolic (checked when the model ran eagerly)
        return
    if B > 0 and not batched(lengths) and (lengths.min() < 1 or lengths.max() > T):
        raise ValueError(f"lengths must hold one length in [1, {T}] per batch element ({B}), got {lengths.tolist()}")


def as_lengths(lengths) -> Tensor:
    """``lengths`` (a tensor, list or array) as an int64 tensor; a value that is not a whole
    number (``2.7``, NaN, ``True``) is a one-line ``ValueError`` naming it, where a cast would
    quietly truncate it."""
    t = lengths if isinstance(lengths, Tensor) else torch.as_tensor(lengths)
    if t.dtype == torch.bool or t.is_complex() or (t.is_floating_point() and not batched(t)):
        whole = not (t.dtype == torch.bool or t.is_complex()) and bool(
            torch.isfinite(t).all() and torch.equal(t, t.round())
        )
        if not whole:
            values = [f"{v:g}" if isinstance(v, float) else str(v) for v in t.flatten().tolist()]
            raise ValueError(
                f"lengths must be whole numbers, one per sequence, got [{', '.join(values[:8])}"
                f"{', ...' if len(values) > 8 else ''}] ({t.dtype}); give integers, e.g. torch.tensor([5, 3]) "
                f"(a cast would truncate them)"
            )
    return t.to(torch.long) if t.dtype != torch.long else t


def real_option(name: str, value, expected: str = "a finite number", ok=lambda v: True) -> float:
    """A cell's real-valued option as a float: a finite number (not a bool) for which ``ok``
    holds, else a one-line ``ValueError`` naming the option, the value and ``expected`` (the
    option's documented range, docs/models.md)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return float(value)


def bool_option(name: str, value) -> bool:
    """A cell's switch: ``True`` or ``False`` only (``bool("no")`` is True, ``bool(2)`` a typo's
    guess), else a one-line ``ValueError`` naming the option and the value."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def positive_option(name: str, value) -> float:
    """:func:`real_option` > 0."""
    return real_option(name, value, "a positive number", lambda v: v > 0)


def nonnegative_option(name: str, value) -> float:
    """:func:`real_option` >= 0."""
    return real_option(name, value, "a number >= 0", lambda v: v >= 0)


def check_size(name: str, value) -> None:
    """torch.nn's rule for a size: an ``int`` (``nn.LSTM(4, 6.5)`` raises; ``int()`` would quietly
    build width 6)."""
    if not isinstance(value, int):
        raise TypeError(f"{name} should be of type int, got: {type(value).__name__} ({value!r})")


class Cell(nn.Module):
    """One recurrent time step: ``forward(x_t, state) -> (h_t, state)``.

    Subclasses set ``input_size``/``hidden_size``, implement ``forward`` and may override

    * ``init_state`` when the state is not a single (B, H) tensor (LSTM: ``(h, c)``),
    * ``sequence`` with a fast path over a whole time-major sequence; it must equal
      :func:`unroll` (tested in float64) and is bypassed when ``backend == "reference"``,
    * ``batched_sequence`` with a fast path for an ensemble's batched model (the members'
      parameters stacked on a leading axis under ``torch.func.vmap``, :mod:`rnnlab.ensemble`);
      the default is the step loop, which runs under vmap for any cell,
    * ``tag_parameters`` to route parameters to optimizer groups (e.g. ``"orthogonal"``).
    """

    #: the methods that run many steps at once without calling ``forward`` (fast paths)
    FAST_PATHS = ("sequence", "sequence_mapped", "batched_sequence", "small_sequence")

    #: values one sequence's time step of the cell's batched path (an ensemble member's) holds at
    #: the peak of a training step, per unit of ``hidden_size``: the activations kept for the
    #: backward pass, their gradients and the step's temporaries (:meth:`step_values`). Chosen
    #: from above the peak memory growth of real ensembles (three members, ListOps, T = 601,
    #: docs/ensembles.md, "Memory"): 25 (minGRU), 31 (LRU), 33 (LSTM, minLSTM), 49 (sLSTM), 50 (mLSTM)
    TRAIN_VALUES_PER_UNIT = 64
    #: the same in an evaluation (no gradients): 6 (LRU) to 14 (minLSTM, mLSTM) measured
    EVAL_VALUES_PER_UNIT = 24

    def __init_subclass__(cls, **kwargs):
        """A cell of one's own that derives from a built-in cell and overrides ``forward`` (or
        ``sequence``) runs its own code: the fast paths it would inherit from above that
        override compute the parent's recurrence, not its own, so they are replaced by the
        defaults here, which call ``forward`` (or ``sequence``) step by step. A fast path the
        class defines itself, or one defined with its ``forward``, is kept; rnnlab's own cells
        keep theirs (they are tested against their step loops)."""
        super().__init_subclass__(**kwargs)
        for step, paths in (("forward", Cell.FAST_PATHS), ("sequence", Cell.FAST_PATHS[1:])):
            owner = _defining_class(cls, step)
            if owner.__module__.split(".")[0] == "rnnlab":
                continue
            for name in paths:
                where = _defining_class(cls, name)
                if where is not Cell and where is not owner and issubclass(owner, where):
                    setattr(cls, name, vars(Cell)[name])

    def __init__(self, input_size: int, hidden_size: int, backend: str = "auto"):
        super().__init__()
        check_size("input_size", input_size)
        check_size("hidden_size", hidden_size)
        if int(input_size) < 1 or int(hidden_size) < 1:
            raise ValueError(
                f"input_size and hidden_size must be positive integers, got "
                f"input_size={input_size}, hidden_size={hidden_size}"
            )
        if backend not in BACKENDS + self.extra_backends():
            raise ValueError(
                f"unknown backend {backend!r} for {type(self).__name__}; expected one of "
                f"{BACKENDS + self.extra_backends()}"
            )
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.backend = backend
        self._tags: dict[str, str] = {}

    @classmethod
    def extra_backends(cls) -> tuple[str, ...]:
        return ()

    # --- state -------------------------------------------------------------------------
    def init_state(self, batch_size: int, *, device=None, dtype=None) -> State:
        p = next(self.parameters())
        return torch.zeros(batch_size, self.hidden_size, device=device or p.device, dtype=dtype or p.dtype)

    def step_values(self, training: bool = True) -> int:
        """The values one sequence's time step holds at the peak of a training step (``training``)
        or an evaluation, on the batched path, from above: what an ensemble's memory check
        (:func:`rnnlab.ensemble.member_bytes`) multiplies by batch and length. By default
        :data:`TRAIN_VALUES_PER_UNIT` or :data:`EVAL_VALUES_PER_UNIT` per unit; a cell whose step
        holds more per unit (a state of many modes per unit: S4D, Mamba) overrides it."""
        return (self.TRAIN_VALUES_PER_UNIT if training else self.EVAL_VALUES_PER_UNIT) * self.hidden_size

    # --- parameters --------------------------------------------------------------------
    def tag_parameters(self, prefix: str, tag: str) -> None:
        """Put every parameter whose name starts with ``prefix`` into group ``tag``."""
        self._tags[prefix] = tag

    def parameter_tag(self, name: str) -> str:
        best, tag = -1, "default"
        for prefix, t in self._tags.items():
            if name.startswith(prefix) and len(prefix) > best:
                best, tag = len(prefix), t
        return tag

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by tag, e.g. ``{"default": [...], "orthogonal": [...]}``."""
        groups: dict[str, list[nn.Parameter]] = {}
        for name, p in self.named_parameters():
            groups.setdefault(self.parameter_tag(name), []).append(p)
        return groups

    def regularization(self) -> Tensor | None:
        """An extra loss term the cell asks for (e.g. nnRNN's eigenvalue-modulus penalty)."""
        return None

    def group_scales(self) -> dict[str, float]:
        """Factors for the learning rate and weight decay of tagged groups (DMU: 1 / (2 n))."""
        return {}

    def free_parameter_count(self) -> int:
        """Free parameters as the papers count them (n(n-1)/2 per orthogonal matrix)."""
        return sum(p.numel() for p in self.parameters())

    def recurrent_matrix(self) -> Tensor | None:
        """The (H, H) matrix W with ``h_t = f(W h_{t-1} + ...)``, for analysis (Schur views,
        spectra); None when the cell has none. Default: ``weight_hh`` when it is square
        (vanilla RNN, expRNN, scoRNN, asRNN's orthogonal W_hh); gated cells stack several
        matrices in weight_hh and return None."""
        W = getattr(self, "weight_hh", None)
        if isinstance(W, Tensor) and W.dim() == 2 and W.shape[0] == W.shape[1] == self.hidden_size:
            return W
        return None

    # --- checks ------------------------------------------------------------------------
    def _reference_parameter(self) -> Tensor | None:
        """A parameter whose dtype and device the inputs must match (None without any)."""
        return next(self.parameters(), None)

    def _state_shapes(self) -> tuple[tuple[int, ...], ...] | None:
        """The per-example shapes of the state's leaves; None for a single-tensor state."""
        shapes = getattr(self, "_state_shapes_cache", None)
        if shapes is None:
            empty = self.init_state(0)
            shapes = (
                (("tensor", tuple(empty.shape[1:])),)
                if isinstance(empty, Tensor)
                else tuple(("tuple", tuple(s.shape[1:])) for s in empty)
            )
            object.__setattr__(self, "_state_shapes_cache", shapes)
        return shapes

    def _name(self) -> str:
        # torch's parametrize swaps the class for "Parametrized<Name>"
        return type(self).__name__.removeprefix("Parametrized")

    def check_dtype_device(self, x: Tensor, what: str = "input", name: str | None = None) -> None:
        """``x`` must have the model's dtype and device (no silent casts, no kernel errors)."""
        p = self._reference_parameter()
        if p is None:
            return
        name = name or self._name()
        if x.dtype != p.dtype and not (x.is_floating_point() and autocasting(x.device.type)):
            raise ValueError(
                f"{name} {what} dtype ({x.dtype}) does not match the model's dtype ({p.dtype}); "
                f"convert the {what} with .to({p.dtype}) or the model with model.to({x.dtype})"
            )
        if x.device != p.device:
            raise ValueError(
                f"{name} {what} is on device {x.device} but the model is on {p.device}; move the "
                f"{what} with .to({str(p.device)!r}) or the model with model.to({str(x.device)!r})"
            )

    def check_state(self, state: State, batch: int) -> None:
        """Check a state against the cell: a single (B, H) tensor, or for tuple states (LSTM's
        ``(h, c)``) a tuple of that many (B, H) tensors; dtype and device of the model."""
        shapes = self._state_shapes()
        name = self._name()
        if shapes[0][0] == "tensor":
            if not isinstance(state, Tensor):
                raise ValueError(
                    f"{name} expects its state as one tensor of shape ({batch}, {self.hidden_size}), "
                    f"got a {type(state).__name__}"
                )
            leaves = [state]
        else:
            if (
                not isinstance(state, (tuple, list))
                or len(state) != len(shapes)
                or not all(isinstance(s, Tensor) for s in state)
            ):
                got = type(state).__name__ + ("" if not isinstance(state, (tuple, list)) else f" of {len(state)}")
                raise ValueError(
                    f"{name} expects its state as a tuple of {len(shapes)} tensors (e.g. LSTM's "
                    f"(h, c)), each of shape ({batch}, {self.hidden_size}); got a {got}"
                )
            leaves = list(state)
        for i, (leaf, (_, per_example)) in enumerate(zip(leaves, shapes)):
            expected = (batch,) + per_example
            if tuple(leaf.shape) != expected:
                where = "state" if len(leaves) == 1 else f"state[{i}]"
                raise ValueError(f"{name}: expected {where} of size {expected}, got {list(leaf.shape)}")
            self.check_dtype_device(leaf, "state")

    def check_input(self, x: Tensor) -> None:
        """A time-major input (T, B, I): 3-D, width ``input_size``, T >= 1, B >= 1, and the
        model's dtype and device."""
        name = self._name()
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(
                f"{name} expects a time-major input of shape (T, B, {self.input_size}), got {tuple(x.shape)}"
            )
        if x.shape[0] == 0:
            raise ValueError(
                f"{name} got an empty sequence (T = 0, input shape {tuple(x.shape)}); "
                f"a recurrence needs at least one time step"
            )
        if x.shape[1] == 0:
            raise ValueError(
                f"{name}.sequence got an empty batch (B = 0, input shape {tuple(x.shape)}); "
                f"the layers (rnnlab.Recurrent) return an empty result for it"
            )
        self.check_dtype_device(x)

    def start_sequence(self, x: Tensor, state: State | None) -> State:
        """Check a time-major input and the state for a fast path and return the initial state
        (zeros when ``state`` is None). Every ``sequence`` (fast path or :func:`unroll`) calls
        this before any kernel runs."""
        self.check_input(x)
        if state is None:
            state = self.init_state(x.shape[1], device=x.device, dtype=x.dtype)
        else:
            self.check_state(state, x.shape[1])
        return state

    # --- time --------------------------------------------------------------------------
    def __call__(self, x_t: Tensor, state: State | None = None, *args, **kwargs):
        """One step. Like ``torch.nn.RNNCell``, ``state`` may be omitted (zeros) and ``x_t``
        may be unbatched (I,) with an unbatched state; the state is checked (structure, size,
        dtype, device) before the step runs."""
        if not isinstance(x_t, Tensor) or x_t.dim() not in (1, 2) or x_t.shape[-1] != self.input_size:
            shape = tuple(x_t.shape) if isinstance(x_t, Tensor) else type(x_t).__name__
            raise ValueError(
                f"{self._name()} expects one step of shape (B, {self.input_size}) or ({self.input_size},), got {shape}"
            )
        if _tracing():
            # torch.jit.trace / torch.export / torch.compile: shapes are symbolic; the checks
            # ran when the model was called eagerly
            if state is None:
                state = self.init_state(x_t.shape[0], device=x_t.device, dtype=x_t.dtype)
            return super().__call__(x_t, state, *args, **kwargs)
        unbatched = x_t.dim() == 1
        if unbatched:
            x_t = x_t.unsqueeze(0)
            if state is not None:
                state = map_state(lambda s: s.unsqueeze(0), state)
        if state is None:
            self.check_dtype_device(x_t)
            state = self.init_state(x_t.shape[0], device=x_t.device, dtype=x_t.dtype)
        else:
            self.check_state(state, x_t.shape[0])
        h, state = super().__call__(x_t, state, *args, **kwargs)
        if unbatched:
            h, state = h.squeeze(0), map_state(lambda s: s.squeeze(0), state)
        return h, state

    def sequence(self, x: Tensor, state: State | None = None, lengths: Tensor | None = None):
        """Run a whole time-major sequence ``x`` (T, B, I) -> (outputs (T, B, H), state)."""
        return unroll(self, x, state, lengths)

    def sequence_mapped(self, x: Tensor, state: State | None = None, lengths: Tensor | None = None):
        """Like :meth:`sequence`, but the outputs may come in other coordinates:
        ``(z (T, B, H'), state, M)`` with ``h_t = z_t @ M.T`` (``M`` (H, H')), or ``M = None``
        when ``z`` is h itself (the default). A linear readout can then absorb ``M`` into its
        weight (``W_o h_t = (W_o M) z_t``) and skip a (T B, H') x (H', H) product and its
        backward (asRNN: ``M = W_f^{-1}``; see :meth:`Recurrent.forward_mapped`). ``state`` is
        always in h coordinates."""
        out, state = self.sequence(x, state, lengths)
        return out, state, None

    def batched_sequence(self, x: Tensor, state: State | None = None, lengths: Tensor | None = None):
        """Like :meth:`sequence`, as an ensemble's batched model runs it: inside
        ``torch.func.vmap`` over the members' stacked parameters (:class:`rnnlab.stacked_model.StackedModel`),
        whatever this cell's ``backend``. The default is the reference step loop
        (:func:`unroll`, correct for every cell, slower); a cell whose fast path can run batched
        overrides it (the ensemble loops of :mod:`rnnlab.kernels.families`, one module per
        recurrence family; first that family's compiled loops, built by :mod:`rnnlab.kernels.small`,
        where the backend chooses them). It must equal :func:`unroll` for each member (tested
        in float64 for every registered cell)."""
        return unroll(self, x, state, lengths)

    def small_sequence(self, x: Tensor, state: State | None = None, lengths: Tensor | None = None):
        """The compiled loops of :mod:`rnnlab.kernels.small` where this cell has them and its
        backend chooses them, else None (the default: none)."""
        return None

    #: the recurrence family of :data:`rnnlab.kernels.dispatch.TABLE` whose rule picks this cell's
    #: path (:meth:`path`); None: the cell's own ``sequence`` decides (``reference`` or its fast path)
    family: str | None = None

    #: whether the compiled loops' batched path (:meth:`small_sequence` inside an ensemble) reads
    #: its input only through :func:`rnnlab.kernels.ensemble.batched_linear` (a one-hot input may
    #: then come as its tokens, :meth:`reads_input_linearly`)
    linear_input: bool = False

    def reads_input_linearly(self, x: Tensor, lengths: Tensor | None = None, *, ensemble: bool = True) -> bool:
        """Whether :meth:`batched_sequence` (``ensemble=False``: :meth:`sequence`) of ``x``
        (T, B, I) reads ``x`` only through :func:`rnnlab.kernels.ensemble.batched_linear`: a
        cell with :attr:`linear_input` whose dispatch rule picks the compiled loops, and no
        autocast."""
        return (
            self.linear_input
            and not autocasting(x.device.type)
            and self.path(x, lengths, ensemble=ensemble) in dispatch.COMPILED
        )

    def dispatch_width(self) -> int:
        """The width the dispatch rule compares with the compiled loops' limits (the widest layer)."""
        return self.hidden_size

    def dispatch_weight(self) -> Tensor | None:
        """The weight whose dtype and device the dispatch rule reads beside the input's, for a
        family with compiled loops: the recurrent matrix (``weight_hh``)."""
        return self.weight_hh

    def path(self, x: Tensor, lengths: Tensor | None = None, *, ensemble: bool = False) -> str:
        """The path (:data:`rnnlab.kernels.dispatch.PATHS`) this cell runs ``x`` (T, B, I) on:
        :func:`rnnlab.kernels.dispatch.choose` for its family, backend, width, the input's and
        weights' dtype and device, lengths, and whether it runs inside an ensemble."""
        own = vars(self)  # plain options (nn.Module's attribute fallback is slow when they are absent)
        return dispatch.choose(
            self.family,
            self.backend,
            width=self.dispatch_width(),
            tensors=(x, self.dispatch_weight()) if dispatch.TABLE[self.family].kernel else (x,),
            ensemble=ensemble,
            lengths=lengths is not None,
            nonlinearity=own.get("nonlinearity", "tanh"),
            batch=x.shape[1] if x.dim() == 3 else 1,
            chunk=own.get("chunk", 0),
            convolution="conv" in self.extra_backends(),
        )

    def batched_first(self, x: Tensor, state: State | None, lengths: Tensor | None):
        """What a batched path of :meth:`batched_sequence` does before its own loop, as the
        dispatch rule says (:meth:`path` with ``ensemble=True``): the compiled loops
        (:meth:`small_sequence`), or the step loop (e.g. lengths under a bf16/fp16 autocast,
        where a cell's batched loop has no masked form). Returns the output and state, or None:
        go on with the cell's own batched loop."""
        path = self.path(x, lengths, ensemble=True)
        if path in dispatch.COMPILED:
            return self.small_sequence(x, state, lengths)
        if path == "step":
            return unroll(self, x, state, lengths)
        return None


def _defining_class(cls: type, name: str) -> type:
    """The class of ``cls``'s method resolution order that defines ``name``."""
    return next(k for k in cls.__mro__ if name in vars(k))


def batched_path(cell_class: type) -> str | Callable:
    """What ``cell_class`` runs in an ensemble's batched model: its own
    :meth:`Cell.batched_sequence` (a batched fast path), or "reference" (the step loop)."""
    method = cell_class.batched_sequence
    return "reference" if method is Cell.batched_sequence else method


def batched_paths(cell_classes: Iterable[type]) -> dict[type, Callable]:
    """The classes among ``cell_classes`` and their bases that define a batched path of their
    own (:meth:`Cell.batched_sequence`), each with it."""
    out: dict[type, Callable] = {}
    for cls in cell_classes:
        for k in cls.__mro__:
            if k is not Cell and isinstance(k, type) and issubclass(k, Cell) and "batched_sequence" in vars(k):
                out[k] = vars(k)["batched_sequence"]
    return out


def unroll(cell: Cell, x: Tensor, state: State | None = None, lengths: Tensor | None = None):
    """The reference loop over time: ``x`` is (T, B, I); returns ``(outputs (T, B, H), state)``.

    Parametrized weights (orthogonal maps, ...) are evaluated once per call, not per step.
    With ``lengths`` (B,), steps at or past a sequence's length leave its state unchanged and
    give zero outputs, so the returned state is each sequence's state at its own last step.
    """
    state = cell.start_sequence(x, state)
    outputs = []
    # torch.jit.trace refuses parametrization caching: a traced loop evaluates the maps per step
    with contextlib.nullcontext() if torch.jit.is_tracing() else P.cached():
        if lengths is None:
            for x_t in x.unbind(0):
                h, state = cell(x_t, state)
                outputs.append(h)
        else:
            lengths = as_lengths(lengths).to(x.device)
            for t, x_t in enumerate(x.unbind(0)):
                h, new = cell(x_t, state)
                keep = (lengths > t).unsqueeze(1)
                state = map_state(lambda n, o, keep=keep: torch.where(keep, n, o), new, state)
                outputs.append(h * keep.to(h.dtype))
    if not outputs:
        raise ValueError("cannot unroll over an empty sequence (T = 0)")
    return torch.stack(outputs), state


def iter_cells(module: nn.Module) -> Iterator[Cell]:
    return (m for m in module.modules() if isinstance(m, Cell))
