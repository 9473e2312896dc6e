"""The cell contract, the reference time loop and the `torch.nn.RNN`-style layer.

Conventions (see DESIGN.md): column form ``h_t = f(W_hh h_{t-1} + W_xh x_t + b)`` with
``weight_hh`` of shape (H, H) applied as ``h @ weight_hh.T``. Sequences inside the library are
time-major ``(T, B, I)``; layers accept ``batch_first`` like ``torch.nn.RNN``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize as P
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ..kernels.checkpoint import checkpointed_sequence
from ..kernels.ensemble import batched
from ..kernels.state import State, map_state

__all__ = ["BACKENDS", "Cell", "Recurrent", "State", "check_lengths", "iter_cells", "unroll"]

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


class ThreadsWarning(UserWarning):
    """A recurrent layer runs small per-step products on the CPU with several torch threads
    (see :data:`SMALL_STEP_MACS`); silence it with
    ``warnings.simplefilter("ignore", rnnlab.ThreadsWarning)``."""


#: Per-step size ``B * H * H`` (multiply-adds of one (B, H) x (H, H) product) under which a layer
#: on the CPU warns once per process when torch runs more than one thread: a step this small
#: takes microseconds on one core, about what waking and joining the other threads costs for
#: each of its operations, so extra threads cannot make it faster and measurably make it slower
#: (docs/layers.md, "Threads").
SMALL_STEP_MACS = 1 << 18
_threads_warned = False


def _warn_threads(layer: Recurrent, x: Tensor) -> None:
    global _threads_warned
    if _threads_warned or x.device.type != "cpu" or _tracing():
        return
    n = torch.get_num_threads()
    B, H = x.shape[1], max(layer.hidden_sizes)
    if n <= 1 or B * H * H >= SMALL_STEP_MACS:
        return
    _threads_warned = True
    import warnings

    warnings.warn(
        f"{type(layer).__name__} runs on the CPU with {n} torch threads at batch {B}, hidden size {H}: "
        f"per-step products this small (B*H*H = {B * H * H:,} < {SMALL_STEP_MACS:,}) run several times "
        f"slower multi-threaded than on one thread (torch.nn.RNN too); call torch.set_num_threads(1) "
        f"(docs/layers.md, 'Threads'). Shown once per process; silence it with "
        f"warnings.simplefilter('ignore', rnnlab.ThreadsWarning).",
        ThreadsWarning,
        stacklevel=6,  # the caller of layer(x)
    )


def _autocast_on(device: torch.device) -> bool:
    """Whether autocast is enabled for ``device``'s type: mixed dtypes are then expected (bf16
    input projections, float32 parameters), so the dtype checks stand aside."""
    try:
        return bool(torch.is_autocast_enabled(device.type))
    except TypeError:  # torch < 2.4
        return bool(torch.is_autocast_enabled() if device.type == "cuda" else torch.is_autocast_cpu_enabled())


def check_lengths(lengths: Tensor, T: int, B: int) -> None:
    """``lengths`` must hold one length in [1, T] per batch element. Inside ``torch.func.vmap``
    (an ensemble of models, :mod:`rnnlab.ensemble`) the values cannot be read: the caller checks
    each member's lengths before."""
    if lengths.shape != (B,):
        got = tuple(lengths.shape) if batched(lengths) else lengths.tolist()
        raise ValueError(f"lengths must hold one length in [1, {T}] per batch element ({B}), got {got}")
    if B > 0 and not batched(lengths) and (lengths.min() < 1 or lengths.max() > T):
        raise ValueError(f"lengths must hold one length in [1, {T}] per batch element ({B}), got {lengths.tolist()}")


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
    * ``tag_parameters`` to route parameters to optimizer groups (e.g. ``"orthogonal"``).
    """

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
        if x.dtype != p.dtype and not (x.is_floating_point() and _autocast_on(x.device)):
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
            lengths = lengths.to(x.device)
            for t, x_t in enumerate(x.unbind(0)):
                h, new = cell(x_t, state)
                keep = (lengths > t).unsqueeze(1)
                state = map_state(lambda n, o, keep=keep: torch.where(keep, n, o), new, state)
                outputs.append(h * keep.to(h.dtype))
    if not outputs:
        raise ValueError("cannot unroll over an empty sequence (T = 0)")
    return torch.stack(outputs), state


class Recurrent(nn.Module):
    """A stack of cells with the ``torch.nn.RNN`` interface.

    ``Recurrent(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None, *, cell=CellClass,
    checkpoint_chunk=None, **cell_kwargs)``: the positional order of ``torch.nn.LSTM`` (and of
    ``torch.nn.GRU``; ``rnnlab.RNN`` takes ``nonlinearity`` fourth, as ``torch.nn.RNN``), so
    ``rnnlab.LSTM(5, 8, 2, True, True)`` is ``torch.nn.LSTM(5, 8, 2, True, True)``.
    ``device``/``dtype`` place the parameters as torch's factory arguments do. ``bias=False``
    goes to cells that have the option (RNN, IRNN, LSTM, GRU, LT-RNN, MomentumLSTM) and is refused by the others;
    ``proj_size`` must be 0. ``forward(input, h0=None, lengths=None) -> (output, h_n)``.
    ``input`` may be a tensor ((T, B, I), or (B, T, I) with ``batch_first``; unbatched (T, I)
    with an unbatched ``h0`` (D * num_layers, H), as torch), or a ``PackedSequence``. ``h_n``
    is (D * num_layers, B, H) (D = 2 when bidirectional, else 1), or a tuple of such tensors for
    cells with tuple states (LSTM: ``(h_n, c_n)``), exactly as torch returns. Family layers
    (``rnnlab.LSTM``, ``rnnlab.ASRNN``, ...) fix ``cell``. :meth:`from_torch` and
    :meth:`to_torch` convert from and to ``torch.nn.LSTM``/``GRU``/``RNN``.

    Under ``torch.jit.trace`` and ``torch.export`` the layer runs every cell's step loop
    (:func:`unroll`, the reference the fast paths are tested against), which both capture;
    the captured graph is unrolled over the example's number of steps. ``torch.compile`` runs
    the fast paths (docs/layers.md, "Capture").

    ``bidirectional=True``: as ``torch.nn.RNN``, every layer has a second cell that reads the
    sequence backwards (each sequence reversed within its own length when ``lengths`` or a
    PackedSequence is given); the layer's output is ``[forward; backward]`` (2H wide) and
    ``h_n`` holds the forward and backward final states of layer 0, then layer 1, ...
    (``self.cells`` is in that order: ``cells[2 * l + d]``).

    Checks before any kernel runs (one-line ``ValueError`` naming the value, as torch.nn's
    messages): the input is 3-D with ``input_size`` features, T >= 1, and has the model's dtype
    and device (under ``torch.autocast`` any floating dtype); ``h0`` has the cell's structure (a tensor, or a tuple such as LSTM's
    ``(h0, c0)``), each leaf of size (D * num_layers, B, H) ("Expected hidden size (2, 3, 20),
    got [1, 3, 20]"), and the input's dtype and device; ``lengths`` hold one length in [1, T]
    per sequence. A batch of size 0 gives an empty result (output (T, 0, D H), h_n
    (D * num_layers, 0, H)), as ``torch.nn.LSTM`` does.

    ``hidden_size`` may be a list of per-layer widths (``[2, 3]``: a stack of two layers, the
    second reading the first's 2 (or 2 D) outputs); ``num_layers`` is then its length (or left
    at 1). ``self.hidden_size`` is the output width (the last layer's), ``self.hidden_sizes``
    the list. With layers of different widths ``h0``/``h_n`` are lists of D * num_layers
    per-cell states (in ``self.cells`` order; each (B, H_l) or a tuple of such), since they do
    not stack; with one width they are stacked as in torch.

    ``checkpoint_chunk``: if set, each layer runs in chunks of that many time steps with
    recomputation in backward (:func:`rnnlab.kernels.checkpointed_sequence`) while training:
    same values and gradients, less memory, one extra forward pass.

    Example (any cell class as a layer; the named layers such as ``rnnlab.LSTM`` are this with
    their cell fixed):
    >>> import torch
    >>> from rnnlab.cells import Recurrent, ExpRNNCell
    >>> layer = Recurrent(3, [8, 4], cell=ExpRNNCell)   # two layers of widths 8 and 4
    >>> out, h_n = layer(torch.randn(5, 2, 3))
    >>> out.shape, [h.shape for h in h_n]
    (torch.Size([5, 2, 4]), [torch.Size([2, 8]), torch.Size([2, 4])])
    """

    cell_class: type[Cell] | None = None

    def __init__(
        self,
        input_size: int,
        hidden_size: int | list[int],
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
        *,
        cell: type[Cell] | None = None,
        checkpoint_chunk: int | None = None,
        **cell_kwargs,
    ):
        super().__init__()
        cell = cell or self.cell_class
        if cell is None:
            raise TypeError("Recurrent needs a cell class: Recurrent(..., cell=RNNCell)")
        check_size("input_size", input_size)
        for w in hidden_size if isinstance(hidden_size, (list, tuple)) else [hidden_size]:
            check_size("hidden_size", w)
        check_size("num_layers", num_layers)
        name = type(self).__name__ if self.cell_class is not None else f"Recurrent({cell.__name__})"
        if not isinstance(bias, bool):
            raise TypeError(
                f"{name}: bias must be True or False, got {bias!r} (the torch.nn order is "
                f"input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)"
            )
        if not isinstance(batch_first, bool) and batch_first not in (0, 1):
            raise TypeError(
                f"{name}: batch_first must be True or False, got {batch_first!r} (the torch.nn order "
                f"is input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)"
            )
        if proj_size:
            raise ValueError(
                f"{name}: proj_size={proj_size} (LSTM output projections) is not supported; "
                f"use proj_size=0, or a torch.nn.Linear after the layer"
            )
        if not bias:
            import inspect

            if "bias" not in inspect.signature(cell.__init__).parameters:
                raise ValueError(
                    f"{name}: bias=False is not an option of {cell.__name__} (its update has a bias "
                    f"it cannot drop); leave bias=True. Cells with the option: RNN, IRNN, LSTM, "
                    f"GRU, LT-RNN, MomentumLSTM"
                )
            cell_kwargs["bias"] = False
        if isinstance(hidden_size, (list, tuple)):
            widths = [int(w) for w in hidden_size]
            if not widths or num_layers not in (1, len(widths)):
                raise ValueError(
                    f"hidden_size={list(hidden_size)} gives one width per layer, so num_layers must be "
                    f"{max(len(widths), 1)} (or left at 1), got num_layers={num_layers}"
                )
            num_layers = len(widths)
        else:
            widths = [int(hidden_size)] * max(int(num_layers), 1)
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.input_size, self.hidden_size, self.hidden_sizes = int(input_size), widths[-1], widths
        self._mixed = len(set(widths)) > 1  # per-layer states then travel as a list
        self.num_layers, self.batch_first, self.dropout = int(num_layers), bool(batch_first), dropout
        self.bidirectional = bool(bidirectional)
        self.num_directions = 2 if self.bidirectional else 1
        if checkpoint_chunk is not None and int(checkpoint_chunk) < 1:
            raise ValueError(f"checkpoint_chunk must be a positive number of steps or None, got {checkpoint_chunk}")
        self.checkpoint_chunk = None if checkpoint_chunk is None else int(checkpoint_chunk)
        D = self.num_directions
        self.cells = nn.ModuleList(
            cell(input_size if i == 0 else D * widths[i - 1], widths[i], **cell_kwargs)
            for i in range(num_layers)
            for _ in range(D)
        )
        self.bias = bool(bias)
        if dtype is not None and not torch.empty((), dtype=dtype).is_floating_point():
            raise TypeError(f"{name}: dtype must be a floating-point dtype, got {dtype}")
        if device is not None or dtype is not None:
            # torch's factory arguments: the parameters (and floating buffers) end up there
            self.to(device=device, dtype=dtype)

    @classmethod
    def from_torch(cls, module: nn.Module) -> Recurrent:
        """The rnnlab layer equal to a ``torch.nn.LSTM``/``GRU``/``RNN`` (weights copied; see
        :func:`rnnlab.cells.torch_nn.from_torch`); on a family layer (``rnnlab.LSTM.from_torch``)
        the module must be of that family."""
        from .torch_nn import from_torch

        layer = from_torch(module)
        if not isinstance(layer, Recurrent) or (cls is not Recurrent and not isinstance(layer, cls)):
            raise TypeError(
                f"{cls.__name__}.from_torch got a torch.nn.{type(module).__name__}, which converts to "
                f"rnnlab.{type(layer).__name__}; call rnnlab.from_torch(module)"
            )
        return layer

    def to_torch(self) -> nn.Module:
        """The ``torch.nn.LSTM``/``GRU``/``RNN`` equal to this layer (LSTM, GRU, RNN and IRNN
        layers only; see :func:`rnnlab.cells.torch_nn.to_torch`)."""
        from .torch_nn import to_torch

        return to_torch(self)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        groups: dict[str, list[nn.Parameter]] = {}
        for c in self.cells:
            for tag, ps in c.param_groups().items():
                groups.setdefault(tag, []).extend(ps)
        return groups

    def regularization(self) -> Tensor | None:
        terms = [r for r in (c.regularization() for c in self.cells) if r is not None]
        return sum(terms) if terms else None

    def group_scales(self) -> dict[str, float]:
        scales: dict[str, float] = {}
        for c in self.cells:
            scales.update(c.group_scales())
        return scales

    def free_parameter_count(self) -> int:
        return sum(c.free_parameter_count() for c in self.cells)

    def _layer_state(self, h0: State | None, i: int) -> State | None:
        if h0 is None:
            return None
        if self._mixed:
            return h0[i]
        return map_state(lambda s: s[i], h0)

    def forward(self, input, h0: State | None = None, lengths: Tensor | None = None):
        if isinstance(input, Tensor) and input.dim() == 2:
            return self._forward_unbatched(input, h0, lengths)
        out, h_n, _ = self._run(input, h0, lengths, mapped=False)
        return out, h_n

    def _forward_unbatched(self, input: Tensor, h0: State | None, lengths):
        """``torch.nn.RNN``'s unbatched call: input (T, I) (whatever ``batch_first``), h0 and
        h_n (D * num_layers, H) leaves (per-cell (H_l,) leaves for layers of different widths)."""
        name = type(self).__name__
        batch_dim = 0 if self.batch_first else 1
        if h0 is not None:
            # per-cell states (layers of different widths) gain a batch dim in front, stacked ones
            # in the middle; a wrong structure is left to check_h0's message
            mixed = self._mixed and isinstance(h0, list)
            leaves = (
                [
                    t
                    for st in (h0 if mixed else [h0])
                    for t in ([st] if isinstance(st, Tensor) else st)
                    if isinstance(t, Tensor)
                ]
                if isinstance(h0, (Tensor, tuple, list))
                else []
            )
            want = 1 if self._mixed else 2
            bad = [tuple(t.shape) for t in leaves if t.dim() != want]
            if bad:
                shape = "(H,) per cell" if self._mixed else "(D * num_layers, H)"
                raise ValueError(
                    f"{name}: for an unbatched 2-D input (T, I), h0 must be unbatched too, {shape}; "
                    f"got a leaf of shape {bad[0]}"
                )
            grow = lambda t: t.unsqueeze(0 if self._mixed else 1)  # noqa: E731
            if mixed:
                h0 = [map_state(grow, st) for st in h0]
            elif isinstance(h0, Tensor) or (isinstance(h0, (tuple, list)) and all(isinstance(t, Tensor) for t in h0)):
                h0 = map_state(grow, h0) if isinstance(h0, Tensor) else tuple(grow(t) for t in h0)
        if lengths is not None:
            lengths = torch.as_tensor(lengths).reshape(-1)
        out, h_n, _ = self._run(input.unsqueeze(batch_dim), h0, lengths, mapped=False)
        if self._mixed:
            h_n = [map_state(lambda t: t.squeeze(0), s) for s in h_n]
        else:
            h_n = map_state(lambda t: t.squeeze(1), h_n)
        return out.squeeze(batch_dim), h_n

    def forward_mapped(self, input: Tensor, h0: State | None = None, lengths: Tensor | None = None):
        """``forward`` for a caller that applies a linear map next (a readout): returns
        ``(z, h_n, M)`` with the last layer's outputs ``h = z @ M.T`` (``M = None``: ``z`` is
        h). Cells that compute in transformed coordinates (asRNN) then skip mapping every
        step back to h; ``h_n`` is in h coordinates as in ``forward``. Tensor input only (no
        PackedSequence); with ``checkpoint_chunk`` set while training, or bidirectional, ``M``
        is None."""
        if isinstance(input, PackedSequence):
            raise ValueError("forward_mapped takes a padded tensor and lengths, not a PackedSequence")
        return self._run(input, h0, lengths, mapped=True)

    def check_h0(self, h0: State, x: Tensor) -> None:
        """Validate ``h0`` against the model and the time-major input ``x`` (see the class
        docstring); raises ``ValueError`` with torch.nn's kind of message."""
        name = type(self).__name__
        if self._mixed:
            return self._check_h0_per_layer(h0, x)
        shapes = self.cells[0]._state_shapes()
        expected = (self.num_directions * self.num_layers, x.shape[1], self.hidden_size)
        if shapes[0][0] == "tensor":
            if not isinstance(h0, Tensor):
                raise ValueError(f"{name} expects h0 as one tensor of size {expected}, got a {type(h0).__name__}")
            leaves = [h0]
        else:
            if (
                not isinstance(h0, (tuple, list))
                or len(h0) != len(shapes)
                or not all(isinstance(s, Tensor) for s in h0)
            ):
                got = (
                    f"a tensor of size {list(h0.shape)}"
                    if isinstance(h0, Tensor)
                    else f"a {type(h0).__name__}" + (f" of {len(h0)}" if isinstance(h0, (tuple, list)) else "")
                )
                raise ValueError(
                    f"{name} expects h0 as a tuple of {len(shapes)} tensors (e.g. (h0, c0)), each of "
                    f"size {expected}; got {got}"
                )
            leaves = list(h0)
        for i, leaf in enumerate(leaves):
            what = "hidden" if len(leaves) == 1 else f"hidden[{i}]"
            if tuple(leaf.shape) != expected:
                raise ValueError(f"{name}: Expected {what} size {expected}, got {list(leaf.shape)}")
            if leaf.dtype != x.dtype and not (leaf.is_floating_point() and _autocast_on(x.device)):
                raise ValueError(
                    f"{name}: {what} dtype ({leaf.dtype}) does not match the input dtype ({x.dtype}); "
                    f"convert it with .to({x.dtype})"
                )
            if leaf.device != x.device:
                raise ValueError(
                    f"{name}: {what} is on device {leaf.device} but the input is on {x.device}; "
                    f"move it with .to({str(x.device)!r})"
                )

    def _check_h0_per_layer(self, h0, x: Tensor) -> None:
        """``check_h0`` for layers of different widths: a list of one state per cell."""
        name, n = type(self).__name__, len(self.cells)
        if not isinstance(h0, list) or len(h0) != n:
            got = f"a list of {len(h0)}" if isinstance(h0, list) else f"a {type(h0).__name__}"
            raise ValueError(
                f"{name} has layers of widths {self.hidden_sizes}, so h0 must be a list of {n} per-layer states "
                f"(one per layer and direction, as h_n returns them); got {got}"
            )
        for i, (cell, state) in enumerate(zip(self.cells, h0)):
            leaves = [state] if isinstance(state, Tensor) else list(state)
            expected = (x.shape[1], cell.hidden_size)
            for leaf in leaves:
                if not isinstance(leaf, Tensor) or tuple(leaf.shape) != expected:
                    got = list(leaf.shape) if isinstance(leaf, Tensor) else type(leaf).__name__
                    raise ValueError(f"{name}: Expected h0[{i}] of size {expected}, got {got}")
                if leaf.dtype != x.dtype or leaf.device != x.device:
                    raise ValueError(
                        f"{name}: h0[{i}] is {leaf.dtype} on {leaf.device} but the input is {x.dtype} on "
                        f"{x.device}; convert it with .to(input)"
                    )

    def _empty_result(self, x: Tensor):
        """The result for a batch of size 0: output (T, 0, D H), h_n (D L, 0, H)."""
        T = x.shape[0]
        out = x.new_zeros(T, 0, self.num_directions * self.hidden_size)
        if self._mixed:
            return out, [c.init_state(0, device=x.device, dtype=x.dtype) for c in self.cells]
        zero = self.cells[0].init_state(0, device=x.device, dtype=x.dtype)
        n = self.num_directions * self.num_layers
        h_n = map_state(lambda s: s.unsqueeze(0).expand(n, *s.shape).contiguous(), zero)
        return out, h_n

    @staticmethod
    def _reverse_index(T: int, lengths: Tensor | None, device) -> Tensor | None:
        """(T, B) time indices that reverse each sequence within its own length (positions past
        a length stay in place); an involution. None: a plain flip."""
        if lengths is None:
            return None
        t = torch.arange(T).unsqueeze(1)
        L = lengths.unsqueeze(0)
        return torch.where(t < L, L - 1 - t, t).to(device)

    def _run_cell(self, cell: Cell, x: Tensor, state, lengths, mapped: bool):
        if _capturing():  # jit.trace / export: the step loop, which both capture (see _capturing)
            out, s = unroll(cell, x, state, lengths)
            return out, s, None
        if self.checkpoint_chunk is not None and self.training:
            out, s = checkpointed_sequence(cell, x, state, lengths, self.checkpoint_chunk)
            return out, s, None
        if mapped:
            return cell.sequence_mapped(x, state, lengths)
        out, s = cell.sequence(x, state, lengths)
        return out, s, None

    def _run(self, input, h0: State | None, lengths: Tensor | None, mapped: bool):
        packed = isinstance(input, PackedSequence)
        name = type(self).__name__
        if packed:
            if lengths is not None:
                raise ValueError("pass either a PackedSequence or lengths, not both")
            x, lengths = pad_packed_sequence(input)  # (T, B, I), original batch order
        else:
            if not isinstance(input, Tensor) or input.dim() != 3:
                shape = tuple(input.shape) if isinstance(input, Tensor) else type(input).__name__
                raise ValueError(
                    f"{name} expects a 3-D input ((T, B, I), or (B, T, I) with batch_first=True) or an unbatched "
                    f"2-D one (T, I), got shape {shape}"
                )
            x = input.transpose(0, 1) if self.batch_first else input
        if x.shape[-1] != self.input_size:
            raise ValueError(
                f"{name} was built with input_size={self.input_size} but got input features of size {x.shape[-1]}"
            )
        if x.shape[0] == 0:
            raise ValueError(
                f"{name} got an empty sequence (T = 0, input shape {tuple(input.shape)}); "
                f"a recurrence needs at least one time step"
            )
        self.cells[0].check_dtype_device(x, name=name)
        if h0 is not None:
            self.check_h0(h0, x)
        if lengths is not None:
            lengths = torch.as_tensor(lengths, dtype=torch.long).cpu()
            check_lengths(lengths, x.shape[0], x.shape[1])
        if x.shape[1] == 0:
            out, h_n = self._empty_result(x)
            return (out.transpose(0, 1) if self.batch_first else out), h_n, None
        _warn_threads(self, x)
        finals = []
        M = None
        D = self.num_directions
        rev = self._reverse_index(x.shape[0], lengths, x.device) if D == 2 else None
        for i in range(self.num_layers):
            if i > 0 and self.dropout > 0 and self.training:
                x = nn.functional.dropout(x, self.dropout, True)
            last_mapped = mapped and D == 1 and i == self.num_layers - 1
            out, s, M = self._run_cell(self.cells[i * D], x, self._layer_state(h0, i * D), lengths, last_mapped)
            finals.append(s)
            if D == 2:
                xr = x.flip(0) if rev is None else x.gather(0, rev.unsqueeze(2).expand_as(x))
                outr, sr, _ = self._run_cell(
                    self.cells[i * D + 1], xr, self._layer_state(h0, i * D + 1), lengths, False
                )
                outr = outr.flip(0) if rev is None else outr.gather(0, rev.unsqueeze(2).expand_as(outr))
                out = torch.cat([out, outr], dim=2)
                finals.append(sr)
            x = out
        if self._mixed:
            h_n = finals  # layers of different widths: one state per layer, not stacked
        else:
            h_n = map_state(lambda *s: torch.stack(s), *finals)
        if packed:
            return pack_padded_sequence(x, lengths, enforce_sorted=False), h_n, M
        return (x.transpose(0, 1) if self.batch_first else x), h_n, M


def iter_cells(module: nn.Module) -> Iterator[Cell]:
    return (m for m in module.modules() if isinstance(m, Cell))
