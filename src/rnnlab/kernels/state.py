"""The state a recurrent cell carries from one step to the next: one (B, H) tensor, or a
tuple of them (the LSTM's ``(h, c)``). Shared by the cells and the kernels that run them."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

State = Tensor | tuple[Tensor, ...]


def map_state(fn: Callable[..., Tensor], *states: State) -> State:
    """Apply ``fn`` leaf-wise to one or more states of the same structure."""
    if isinstance(states[0], Tensor):
        return fn(*states)
    return tuple(fn(*leaves) for leaves in zip(*states))
