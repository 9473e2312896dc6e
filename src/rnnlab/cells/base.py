"""The cell contract, the reference time loop and the `torch.nn.RNN`-style layer.

Conventions (see DESIGN.md): column form ``h_t = f(W_hh h_{t-1} + W_xh x_t + b)`` with
``weight_hh`` of shape (H, H) applied as ``h @ weight_hh.T``. Sequences inside the library are
time-major ``(T, B, I)``; layers accept ``batch_first`` like ``torch.nn.RNN``.
"""

from __future__ import annotations

from typing import Iterator, Union

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize as P
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

State = Union[Tensor, tuple[Tensor, ...]]

BACKENDS = ("auto", "reference")


def map_state(fn, *states: State) -> State:
    """Apply ``fn`` leaf-wise to one or more states of the same structure."""
    if isinstance(states[0], Tensor):
        return fn(*states)
    return tuple(fn(*leaves) for leaves in zip(*states))


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
        return torch.zeros(
            batch_size, self.hidden_size, device=device or p.device, dtype=dtype or p.dtype
        )

    @staticmethod
    def output_of(state: State) -> Tensor:
        """The hidden output h of a state (first leaf for tuple states)."""
        return state if isinstance(state, Tensor) else state[0]

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

    # --- time --------------------------------------------------------------------------
    def check_input(self, x: Tensor) -> None:
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(
                f"{type(self).__name__} expects a time-major input of shape (T, B, "
                f"{self.input_size}), got {tuple(x.shape)}"
            )

    def start_sequence(self, x: Tensor, state: State | None) -> State:
        """Check a time-major input for a fast path and return the initial state (zeros when
        ``state`` is None)."""
        self.check_input(x)
        if state is None:
            state = self.init_state(x.shape[1], device=x.device, dtype=x.dtype)
        return state

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
    with P.cached():
        if lengths is None:
            for x_t in x.unbind(0):
                h, state = cell(x_t, state)
                outputs.append(h)
        else:
            lengths = lengths.to(x.device)
            for t, x_t in enumerate(x.unbind(0)):
                h, new = cell(x_t, state)
                keep = (lengths > t).unsqueeze(1)
                state = map_state(lambda n, o: torch.where(keep, n, o), new, state)
                outputs.append(h * keep.to(h.dtype))
    if not outputs:
        raise ValueError("cannot unroll over an empty sequence (T = 0)")
    return torch.stack(outputs), state


class Recurrent(nn.Module):
    """A stack of cells with the ``torch.nn.RNN`` interface.

    ``Recurrent(input_size, hidden_size, num_layers=1, batch_first=False, dropout=0.0,
    cell=CellClass, **cell_kwargs)``; ``forward(input, h0=None, lengths=None) ->
    (output, h_n)``. ``input`` may be a tensor ((T, B, I), or (B, T, I) with
    ``batch_first``) or a ``PackedSequence``. ``h_n`` is (num_layers, B, H), or a tuple of
    such tensors for cells with tuple states (LSTM: ``(h_n, c_n)``), exactly as torch returns.
    Family layers (``rnnlab.LSTM``, ``rnnlab.ASRNN``, ...) fix ``cell``.
    ``hidden_size`` may be a list of per-layer widths (``[2, 3]``: a stack of two layers, the
    second reading the first's 2 outputs); ``num_layers`` is then its length (or left at 1).
    ``self.hidden_size`` is the output width (the last layer's), ``self.hidden_sizes`` the
    list. With layers of different widths ``h0``/``h_n`` are lists of per-layer states, since
    they do not stack; with one width they are stacked as in torch.
    ``checkpoint_chunk``: if set, each layer runs in chunks of that many time steps with
    recomputation in backward (:func:`rnnlab.kernels.checkpointed_sequence`) while training:
    same values and gradients, less memory, one extra forward pass.
    """

    cell_class: type[Cell] | None = None

    def __init__(
        self,
        input_size: int,
        hidden_size: int | list[int],
        num_layers: int = 1,
        batch_first: bool = False,
        dropout: float = 0.0,
        cell: type[Cell] | None = None,
        checkpoint_chunk: int | None = None,
        **cell_kwargs,
    ):
        super().__init__()
        cell = cell or self.cell_class
        if cell is None:
            raise TypeError("Recurrent needs a cell class: Recurrent(..., cell=RNNCell)")
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
        self.num_layers, self.batch_first, self.dropout = int(num_layers), bool(batch_first), dropout
        if checkpoint_chunk is not None and int(checkpoint_chunk) < 1:
            raise ValueError(f"checkpoint_chunk must be a positive number of steps or None, got {checkpoint_chunk}")
        self.checkpoint_chunk = None if checkpoint_chunk is None else int(checkpoint_chunk)
        self.cells = nn.ModuleList(
            cell(input_size if i == 0 else widths[i - 1], widths[i], **cell_kwargs)
            for i in range(num_layers)
        )

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
        if isinstance(h0, list):
            if len(h0) != self.num_layers:
                raise ValueError(f"h0 has {len(h0)} per-layer states, expected num_layers={self.num_layers}")
            return h0[i]
        return map_state(lambda s: s[i], h0)

    def forward(self, input, h0: State | None = None, lengths: Tensor | None = None):
        out, h_n, _ = self._run(input, h0, lengths, mapped=False)
        return out, h_n

    def forward_mapped(self, input: Tensor, h0: State | None = None, lengths: Tensor | None = None):
        """``forward`` for a caller that applies a linear map next (a readout): returns
        ``(z, h_n, M)`` with the last layer's outputs ``h = z @ M.T`` (``M = None``: ``z`` is
        h). Cells that compute in transformed coordinates (asRNN) then skip mapping every
        step back to h; ``h_n`` is in h coordinates as in ``forward``. Tensor input only (no
        PackedSequence); with ``checkpoint_chunk`` set while training, ``M`` is None."""
        if isinstance(input, PackedSequence):
            raise ValueError("forward_mapped takes a padded tensor and lengths, not a PackedSequence")
        return self._run(input, h0, lengths, mapped=True)

    def _run(self, input, h0: State | None, lengths: Tensor | None, mapped: bool):
        packed = isinstance(input, PackedSequence)
        if packed:
            if lengths is not None:
                raise ValueError("pass either a PackedSequence or lengths, not both")
            x, lengths = pad_packed_sequence(input)  # (T, B, I), original batch order
        else:
            if input.dim() != 3:
                raise ValueError(
                    f"{type(self).__name__} expects a 3-D input ((T, B, I), or (B, T, I) with "
                    f"batch_first=True), got shape {tuple(input.shape)}"
                )
            x = input.transpose(0, 1) if self.batch_first else input
        if x.shape[-1] != self.input_size:
            raise ValueError(
                f"{type(self).__name__} was built with input_size={self.input_size} but got "
                f"input features of size {x.shape[-1]}"
            )
        if lengths is not None:
            lengths = torch.as_tensor(lengths, dtype=torch.long).cpu()
            if lengths.shape != (x.shape[1],) or lengths.min() < 1 or lengths.max() > x.shape[0]:
                raise ValueError(
                    f"lengths must hold one length in [1, {x.shape[0]}] per batch element "
                    f"({x.shape[1]}), got {lengths.tolist()}"
                )
        finals = []
        M = None
        last = len(self.cells) - 1
        for i, cell in enumerate(self.cells):
            if i > 0 and self.dropout > 0 and self.training:
                x = nn.functional.dropout(x, self.dropout, True)
            if self.checkpoint_chunk is not None and self.training:
                from ..kernels.checkpoint import checkpointed_sequence

                x, s = checkpointed_sequence(cell, x, self._layer_state(h0, i), lengths, self.checkpoint_chunk)
            elif mapped and i == last:
                x, s, M = cell.sequence_mapped(x, self._layer_state(h0, i), lengths)
            else:
                x, s = cell.sequence(x, self._layer_state(h0, i), lengths)
            finals.append(s)
        if len(set(self.hidden_sizes)) > 1:
            h_n = finals  # layers of different widths: one state per layer, not stacked
        else:
            h_n = map_state(lambda *s: torch.stack(s), *finals)
        if packed:
            return pack_padded_sequence(x, lengths, enforce_sorted=False), h_n, M
        return (x.transpose(0, 1) if self.batch_first else x), h_n, M


def iter_cells(module: nn.Module) -> Iterator[Cell]:
    return (m for m in module.modules() if isinstance(m, Cell))
