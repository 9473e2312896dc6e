"""The state a recurrent cell carries from one step to the next: one (B, H) tensor, or a
tuple of them (the LSTM's ``(h, c)``). Shared by the cells and the kernels that run them."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

State = Tensor | tuple[Tensor, ...]


def map_state(fn: Callable[..., Tensor], *states: State) -> State:
    """Apply ``fn`` leaf-wise to one or more states of the same structure: a tensor, a tuple
    (the LSTM's ``(h, c)``) or a list of per-layer states of a stacked model, nested to any
    depth (a two-layer LSTM's state is a list of two ``(h, c)`` tuples); the structure is kept."""
    if isinstance(states[0], Tensor):
        return fn(*states)
    return type(states[0])(map_state(fn, *leaves) for leaves in zip(*states, strict=True))


def hold_past_length(new: Tensor, h: Tensor, lengths, t: int) -> tuple[Tensor, Tensor]:
    """Step ``t`` of a reference loop with ``lengths``: ``(state, output)``, the state frozen and
    the output zero past each sequence's length (``new`` and ``h`` are (B, H))."""
    keep = (torch.as_tensor(lengths, device=new.device) > t).unsqueeze(1)
    return torch.where(keep, new, h), new * keep.to(new.dtype)
