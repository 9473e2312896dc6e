"""The ``torch.nn.RNN``-style layers: :class:`Recurrent` (a stack of cells, uni- or
bidirectional, over padded, packed or length-masked sequences), one layer class per cell family
(``rnnlab.LSTM``, ``rnnlab.ASRNN``, ...), and the conversions to and from ``torch.nn``'s
recurrent modules.

``from_torch(module)`` turns a ``torch.nn.LSTM``/``GRU``/``RNN`` into ``rnnlab.LSTM``/``GRU``/
``RNN`` (and ``torch.nn.LSTMCell``/``GRUCell``/``RNNCell`` into the rnnlab cell) with the same
sizes, options, weights, device, dtype and train/eval mode; ``to_torch(module)`` goes back.
Weight names follow torch: a layer's ``weight_ih_l{k}`` (``_reverse`` for the backward
direction) is ``cells[D * k + d].weight_ih``; a cell's names are torch's own. The converted
module computes what the original computes (tested to 1e-6 in float32, tests/cells/test_torch_parity.py).
"""

from __future__ import annotations

import re
import warnings

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ..kernels.amp import autocasting
from ..kernels.checkpoint import checkpointed_sequence
from ..kernels.state import State, map_state
from .asrnn import ASRNNCell
from .base import Cell, _capturing, _tracing, as_lengths, check_lengths, check_size, real_option, unroll
from .classic import GRUCell, IRNNCell, LSTMCell, RNNCell
from .dmu import DMUCell, RHNCell
from .euler import AntisymmetricRNNCell, IncrementalRNNCell, LipschitzRNNCell, NAISNetCell
from .fullunitary import FCURNNCell
from .kronecker import KRUCell
from .ltrnn import LTRNNCell
from .minimal import MinGRUCell, MinLSTMCell
from .momentum import MomentumLSTMCell
from .nnrnn import NNRNNCell
from .orthogonal import ExpRNNCell, SCORNNCell
from .oscillator import CoRNNCell, LEMCell
from .softorth import SoftOrthRNNCell
from .ssm import LRUCell, MambaCell, S4DCell
from .unitary import EURNNCell, URNNCell
from .xlstm import MLSTMCell, SLSTMCell


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
    warnings.warn(
        f"{type(layer).__name__} runs on the CPU with {n} torch threads at batch {B}, hidden size {H}: "
        f"per-step products this small (B*H*H = {B * H * H:,} < {SMALL_STEP_MACS:,}) run several times "
        f"slower multi-threaded than on one thread (torch.nn.RNN too); call torch.set_num_threads(1) "
        f"(docs/layers.md, 'Threads'). Shown once per process; silence it with "
        f"warnings.simplefilter('ignore', rnnlab.ThreadsWarning).",
        ThreadsWarning,
        stacklevel=6,  # the caller of layer(x)
    )


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
    #: None, or how the cells run with ensemble members as a leading axis (set on the template
    #: of :func:`rnnlab.stacked_model.batched_template`): "batched" (each cell's
    #: :meth:`~rnnlab.cells.Cell.batched_sequence`) or "reference" (the step loop)
    members: str | None = None

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
        dropout = real_option(f"{name}: dropout", dropout, "a float in [0, 1)", lambda v: 0 <= v < 1)
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
        :func:`from_torch`); on a family layer (``rnnlab.LSTM.from_torch``)
        the module must be of that family."""
        layer = from_torch(module)
        if not isinstance(layer, Recurrent) or (cls is not Recurrent and not isinstance(layer, cls)):
            raise TypeError(
                f"{cls.__name__}.from_torch got a torch.nn.{type(module).__name__}, which converts to "
                f"rnnlab.{type(layer).__name__}; call rnnlab.from_torch(module)"
            )
        return layer

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """``nn.Module.load_state_dict``; a state dict of a ``torch.nn.LSTM``/``GRU``/``RNN``
        (keys ``weight_ih_l0``, ``bias_hh_l1_reverse``, ...) loads too, into an LSTM, GRU, RNN
        or IRNN layer of the same sizes, as :meth:`from_torch` copies the weights.

        >>> import torch, rnnlab
        >>> ref = torch.nn.LSTM(4, 6)
        >>> layer = rnnlab.LSTM(4, 6)
        >>> _ = layer.load_state_dict(ref.state_dict())
        >>> x = torch.randn(5, 2, 4)
        >>> bool(torch.allclose(layer(x)[0], ref(x)[0], atol=1e-6))
        True
        """
        keys = list(state_dict)
        if keys and all(_TORCH_KEY.match(k) for k in keys):
            _torch_class(self.cells[0], f"{type(self).__name__} (loading a torch.nn RNN layer's state dict)")
            D = self.num_directions
            renamed = {}
            for k, v in state_dict.items():
                kind, part, layer, reverse = _TORCH_KEY.match(k).groups()
                renamed[f"cells.{D * int(layer) + bool(reverse)}.{kind}_{part}"] = v
            state_dict = renamed
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def to_torch(self) -> nn.Module:
        """The ``torch.nn.LSTM``/``GRU``/``RNN`` equal to this layer (LSTM, GRU, RNN and IRNN
        layers only; see :func:`to_torch`)."""
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
            if leaf.dtype != x.dtype and not (leaf.is_floating_point() and autocasting(x.device.type)):
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

    def reads_tokens(self, input: Tensor, lengths: Tensor | None = None) -> bool:
        """Whether this layer's call on ``input`` (a tensor in the layer's own order) reads it
        only through :func:`rnnlab.kernels.ensemble.batched_linear` (its first cell's compiled
        loops, :meth:`rnnlab.cells.Cell.reads_input_linearly`; one direction; not under
        jit.trace, export or torch.compile, nor checkpointed): one-hot inputs may then come as
        their tokens (:func:`rnnlab.kernels.ensemble.one_hot_stand_in`, a tensor with an
        attribute, which the tracers would not carry)."""
        if self.num_directions != 1 or _capturing() or _tracing() or self.members == "reference":
            return False
        if self.members is None and self.checkpoint_chunk is not None and self.training:
            return False
        x = input.transpose(0, 1) if self.batch_first else input
        return self.cells[0].reads_input_linearly(x, lengths, ensemble=self.members is not None)

    def _run_cell(self, cell: Cell, x: Tensor, state, lengths, mapped: bool):
        if self.members is not None:  # an ensemble's batched model, under vmap
            fast = self.members == "batched"
            out, s = cell.batched_sequence(x, state, lengths) if fast else unroll(cell, x, state, lengths)
            return out, s, None
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
            lengths = as_lengths(lengths).cpu()
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


_LAYER_DOC = """``Recurrent`` layer of {cell}: ``torch.nn.RNN``'s interface (positional order input_size,
    hidden_size, num_layers, bias, batch_first, dropout, bidirectional; time-major input unless
    batch_first; packed sequences or ``lengths``), the cell's keyword options passed on.

    Example:
    >>> import torch
    >>> from rnnlab.cells import {name}
    >>> layer = {name}(3, 8, num_layers=2)
    >>> out, h_n = layer(torch.randn(5, 2, 3))       # (T, B, I) -> outputs (T, B, H)
    >>> out.shape
    torch.Size([5, 2, 8])
    >>> out2, _ = layer(torch.randn(5, 2, 3), lengths=torch.tensor([5, 3]))
    >>> bool((out2[3:, 1] == 0).all())                # zero outputs past a sequence's length
    True
    """


def _layer(cls: type[Cell], name: str) -> type[Recurrent]:
    return type(name, (Recurrent,), {"cell_class": cls, "__doc__": _LAYER_DOC.format(cell=cls.__name__, name=name)})


class RNN(Recurrent):
    """``Recurrent`` layer of RNNCell, with ``torch.nn.RNN``'s positional order: ``nonlinearity``
    ("tanh", "relu"; also rnnlab's "modrelu") comes fourth, after ``num_layers``.

    Example (the same numbers as ``torch.nn.RNN`` given the same weights):
    >>> import torch
    >>> from rnnlab.cells import RNN, from_torch
    >>> ref = torch.nn.RNN(3, 8, 1, "relu")
    >>> layer = from_torch(ref)
    >>> type(layer).__name__, layer.cells[0].nonlinearity
    ('RNN', 'relu')
    >>> x = torch.randn(5, 2, 3)
    >>> torch.allclose(layer(x)[0], ref(x)[0], atol=1e-6)
    True
    """

    cell_class = RNNCell

    def __init__(
        self,
        input_size,
        hidden_size,
        num_layers=1,
        nonlinearity="tanh",
        bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        device=None,
        dtype=None,
        **kwargs,
    ):
        if not isinstance(nonlinearity, str):
            raise TypeError(
                f"RNN takes nonlinearity fourth, as torch.nn.RNN does: RNN(input_size, hidden_size, "
                f"num_layers, nonlinearity, bias, batch_first, ...); got nonlinearity={nonlinearity!r}"
            )
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            0,
            device,
            dtype,
            nonlinearity=nonlinearity,
            **kwargs,
        )


IRNN = _layer(IRNNCell, "IRNN")
LSTM = _layer(LSTMCell, "LSTM")
GRU = _layer(GRUCell, "GRU")
ExpRNN = _layer(ExpRNNCell, "ExpRNN")
SCORNN = _layer(SCORNNCell, "SCORNN")
ASRNN = _layer(ASRNNCell, "ASRNN")
NNRNN = _layer(NNRNNCell, "NNRNN")
DMU = _layer(DMUCell, "DMU")
RHN = _layer(RHNCell, "RHN")
LTRNN = _layer(LTRNNCell, "LTRNN")
URNN = _layer(URNNCell, "URNN")
EURNN = _layer(EURNNCell, "EURNN")
MomentumLSTM = _layer(MomentumLSTMCell, "MomentumLSTM")
FCURNN = _layer(FCURNNCell, "FCURNN")
SoftOrthRNN = _layer(SoftOrthRNNCell, "SoftOrthRNN")
KRU = _layer(KRUCell, "KRU")
AntisymmetricRNN = _layer(AntisymmetricRNNCell, "AntisymmetricRNN")
IncrementalRNN = _layer(IncrementalRNNCell, "IncrementalRNN")
NAISNet = _layer(NAISNetCell, "NAISNet")
LipschitzRNN = _layer(LipschitzRNNCell, "LipschitzRNN")
CoRNN = _layer(CoRNNCell, "CoRNN")
LEM = _layer(LEMCell, "LEM")
MinGRU = _layer(MinGRUCell, "MinGRU")
MinLSTM = _layer(MinLSTMCell, "MinLSTM")
SLSTM = _layer(SLSTMCell, "SLSTM")
MLSTM = _layer(MLSTMCell, "MLSTM")
LRU = _layer(LRUCell, "LRU")
S4D = _layer(S4DCell, "S4D")
Mamba = _layer(MambaCell, "Mamba")


_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def _place(module: nn.Module) -> dict:
    p = next(module.parameters(), None)
    return {} if p is None else {"device": p.device, "dtype": p.dtype}


def _copy(dst: nn.Module, dst_suffix: str, src: nn.Module, src_suffix: str, bias: bool) -> None:
    with torch.no_grad():
        for name in _NAMES if bias else _NAMES[:2]:
            getattr(dst, name + dst_suffix).copy_(getattr(src, name + src_suffix))


def _layer_class(module: nn.RNNBase) -> type[Recurrent]:
    if isinstance(module, nn.LSTM):
        if module.proj_size:
            raise ValueError(
                f"torch.nn.LSTM with proj_size={module.proj_size} has no rnnlab counterpart "
                f"(rnnlab's LSTM has no output projection)"
            )
        return LSTM
    if isinstance(module, nn.GRU):
        return GRU
    if isinstance(module, nn.RNN):
        return RNN
    raise TypeError(f"from_torch converts torch.nn.LSTM, GRU and RNN (and their cells), got {type(module).__name__}")


#: a parameter name of a torch.nn.LSTM/GRU/RNN layer: (weight|bias, ih|hh, layer, _reverse)
_TORCH_KEY = re.compile(r"^(weight|bias)_(ih|hh)_l(\d+)(_reverse)?$")


def from_torch(module: nn.Module) -> nn.Module:
    """The rnnlab layer or cell equal to ``module`` (``torch.nn.LSTM``/``GRU``/``RNN`` or
    ``LSTMCell``/``GRUCell``/``RNNCell``): same sizes and options, a copy of the weights, the
    same device, dtype and train/eval mode.

    >>> import torch, rnnlab
    >>> ref = torch.nn.LSTM(5, 8, 2, batch_first=True)
    >>> layer = rnnlab.from_torch(ref)
    >>> x = torch.randn(3, 7, 5)
    >>> bool(torch.allclose(layer(x)[0], ref(x)[0], atol=1e-6))
    True
    """
    if isinstance(module, (nn.LSTMCell, nn.GRUCell, nn.RNNCell)):
        bias = module.bias
        if isinstance(module, nn.LSTMCell):
            cell = LSTMCell(module.input_size, module.hidden_size, bias=bias)
        elif isinstance(module, nn.GRUCell):
            cell = GRUCell(module.input_size, module.hidden_size, bias=bias)
        else:
            cell = RNNCell(module.input_size, module.hidden_size, nonlinearity=module.nonlinearity, bias=bias)
        cell.to(**_place(module))
        _copy(cell, "", module, "", bias)
        return cell.train(module.training)
    if not isinstance(module, nn.RNNBase):
        raise TypeError(
            f"from_torch converts torch.nn.LSTM, GRU and RNN (and their cells), got {type(module).__name__}"
        )
    cls = _layer_class(module)
    kwargs = dict(
        num_layers=module.num_layers,
        bias=module.bias,
        batch_first=module.batch_first,
        dropout=float(module.dropout),
        bidirectional=module.bidirectional,
        **_place(module),
    )
    if isinstance(module, nn.RNN):
        kwargs["nonlinearity"] = module.nonlinearity
    layer = cls(module.input_size, module.hidden_size, **kwargs)
    D = 2 if module.bidirectional else 1
    for k in range(module.num_layers):
        for d in range(D):
            _copy(layer.cells[D * k + d], "", module, f"_l{k}" + ("_reverse" if d else ""), module.bias)
    return layer.train(module.training)


def _torch_class(cell: Cell, what: str):
    for family in (LSTMCell, GRUCell, RNNCell):
        if isinstance(cell, family) and type(cell).forward is not family.forward:
            raise TypeError(
                f"{what}: {type(cell).__name__} derives from {family.__name__} but overrides forward, so "
                f"torch.nn's layer would compute {family.__name__}'s update, not its own; keep the rnnlab "
                f"layer, or capture it with torch.export (docs/layers.md, 'Capture')"
            )
    if isinstance(cell, LSTMCell):
        return nn.LSTM, nn.LSTMCell, {}
    if isinstance(cell, GRUCell):
        return nn.GRU, nn.GRUCell, {}
    if isinstance(cell, RNNCell):
        if cell.nonlinearity == "modrelu":
            raise TypeError(f"{what} uses modReLU, which torch.nn.RNN does not have (tanh or relu only)")
        return nn.RNN, nn.RNNCell, {"nonlinearity": cell.nonlinearity}
    raise TypeError(
        f"{what} has no torch.nn counterpart: to_torch converts rnnlab's LSTM, GRU, RNN and IRNN layers and "
        f"cells (the other families' updates are not in torch.nn); capture it with torch.export instead "
        f"(docs/layers.md, 'Capture')"
    )


def to_torch(module: nn.Module) -> nn.Module:
    """The ``torch.nn.LSTM``/``GRU``/``RNN`` (or cell) equal to an rnnlab LSTM, GRU, RNN or IRNN
    layer (or cell): same sizes and options, a copy of the weights, device, dtype and mode.
    Other families (asRNN, nnRNN, DMU, ...) have no torch.nn counterpart: ``TypeError``."""
    if isinstance(module, Cell):
        layer_cls, cell_cls, extra = _torch_class(module, type(module).__name__)
        bias = module.bias_ih is not None
        out = cell_cls(module.input_size, module.hidden_size, bias=bias, **extra, **_place(module))
        _copy(out, "", module, "", bias)
        return out.train(module.training)
    if not isinstance(module, Recurrent):
        raise TypeError(f"to_torch converts rnnlab layers and cells, got {type(module).__name__}")
    name = type(module).__name__
    first = module.cells[0]
    layer_cls, _, extra = _torch_class(first, name)
    if module._mixed:
        raise ValueError(f"{name} has layers of different widths {module.hidden_sizes}; torch.nn layers have one width")
    bias = first.bias_ih is not None
    out = layer_cls(
        module.input_size,
        module.hidden_size,
        module.num_layers,
        bias=bias,
        batch_first=module.batch_first,
        dropout=module.dropout,
        bidirectional=module.bidirectional,
        **extra,
        **_place(module),
    )
    D = module.num_directions
    for k in range(module.num_layers):
        for d in range(D):
            _copy(out, f"_l{k}" + ("_reverse" if d else ""), module.cells[D * k + d], "", bias)
    return out.train(module.training)
