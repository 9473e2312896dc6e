"""Encoder -> recurrent layer -> readout, built from a ModelConfig and a task's sizes."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .cells import CELLS, Recurrent
from .config import ModelConfig
from .kernels.linear import tall_linear
from .tasks.base import Task


class OneHot(nn.Module):
    def __init__(self, num_tokens: int):
        super().__init__()
        self.num_tokens = num_tokens

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.one_hot(x, self.num_tokens).float()


class L2Pool(nn.Module):
    """Henaff et al.'s l2 pooling: ``P(h)_i = sqrt(sum_{j in pool i} h_j^2)`` over consecutive
    pools of size k; the readout sees ``[h; P(h)]``. (A tiny constant inside the root keeps its
    gradient finite at h = 0.)"""

    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, h: Tensor) -> Tensor:
        pooled = h.unflatten(-1, (-1, self.k)).pow(2).sum(-1).add(1e-12).sqrt()
        return torch.cat([h, pooled], -1)


class SequenceModel(nn.Module):
    """``x`` (B, T) tokens or (B, T, I) features -> encoder -> ``Recurrent`` -> linear readout.

    ``forward(x, state=None, lengths=None) -> (out, state)`` with ``out`` (B, T, O) for
    ``readout="all"`` and (B, O) for ``"last"`` (the output at each sequence's last valid step).
    """

    def __init__(
        self, cell: str, input_size: int, output_size: int, hidden_size: int | list[int], num_layers: int = 1,
        readout: str = "all", num_tokens: int | None = None, embedding: int = 0,
        dropout: float = 0.0, cell_options: dict | None = None, pool: int = 0, dense: int = 0,
    ):
        super().__init__()
        width = hidden_size[-1] if isinstance(hidden_size, (list, tuple)) and hidden_size else hidden_size
        if pool < 0 or (pool and width % pool):
            raise ValueError(f"pool must be 0 (off) or divide the last layer's width {width}, got {pool}")
        if cell not in CELLS:
            from .config import did_you_mean

            raise ValueError(f"unknown cell {cell!r}; registered cells: {sorted(CELLS)}." + did_you_mean(cell, CELLS))
        if readout not in ("all", "last"):
            raise ValueError(f"readout must be 'all' or 'last', got {readout!r}")
        if num_tokens:
            self.encoder = nn.Embedding(num_tokens, embedding) if embedding > 0 else OneHot(num_tokens)
            input_size = embedding if embedding > 0 else num_tokens
        else:
            self.encoder = nn.Identity()
        self.readout_kind = readout
        self.rnn = Recurrent(
            input_size, hidden_size, num_layers, batch_first=True, dropout=dropout,
            cell=CELLS[cell], **(cell_options or {}),
        )
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.pool = L2Pool(pool) if pool else nn.Identity()
        # the last layer's width (per-layer widths), doubled for cell_options bidirectional=true
        width = self.rnn.num_directions * self.rnn.hidden_size
        features = width + (width // pool if pool else 0)
        if dense < 0:
            raise ValueError(f"dense must be >= 0 (0 = no dense layer), got {dense}")
        # DMU's NatLang: a dense layer of 100 units between the recurrent block and the softmax;
        # the paper names no activation, so it is linear (a low-rank factor of the readout)
        self.dense = nn.Linear(features, dense) if dense else nn.Identity()
        self.readout = nn.Linear(dense or features, output_size)

    def forward(self, x: Tensor, state=None, lengths: Tensor | None = None):
        # With nothing between the recurrent layer and the linear readout (no dropout while
        # training, no pooling), cells that compute in other coordinates (asRNN: g = W_f h)
        # hand their map M over and the readout uses W_o M (Recurrent.forward_mapped).
        direct = isinstance(self.pool, nn.Identity) and isinstance(self.dense, nn.Identity) and (isinstance(self.drop, nn.Identity) or not self.training)
        if direct:
            out, state, M = self.rnn.forward_mapped(self.encoder(x), state, lengths)
        else:
            (out, state), M = self.rnn(self.encoder(x), state, lengths), None
        if self.readout_kind == "last":
            if lengths is None:
                out = out[:, -1]
            else:
                out = out[torch.arange(out.shape[0]), torch.as_tensor(lengths).to(out.device) - 1]
        # (tall_linear: the same product as nn.Linear, faster over T * B rows on CPU)
        if M is not None:
            return tall_linear(out, self.readout.weight @ M, self.readout.bias), state
        return tall_linear(self.dense(self.pool(self.drop(out))), self.readout.weight, self.readout.bias), state

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        groups = self.rnn.param_groups()
        inner = {id(p) for ps in groups.values() for p in ps}
        rest = [p for p in self.parameters() if id(p) not in inner]
        groups.setdefault("default", []).extend(rest)
        return groups

    def regularization(self):
        return self.rnn.regularization()

    def group_scales(self) -> dict[str, float]:
        return self.rnn.group_scales()

    def parameter_counts(self) -> dict[str, int]:
        """``free``: as the papers count (n(n-1)/2 per orthogonal matrix); ``elements``: tensor
        elements of all parameters."""
        elements = sum(p.numel() for p in self.parameters())
        rnn_elements = sum(p.numel() for p in self.rnn.parameters())
        return {"free": elements - rnn_elements + self.rnn.free_parameter_count(), "elements": elements}


def build_model(cfg: ModelConfig, task: Task) -> nn.Module:
    """The model a task needs: tasks with ``model_kind = "seq2seq"`` get an encoder-decoder."""
    if getattr(task, "model_kind", "sequence") == "seq2seq":
        from .seq2seq import Seq2Seq

        if cfg.dense:
            raise ValueError(f"model.dense={cfg.dense} applies to sequence models only; the "
                             f"encoder-decoder of task {type(task).__name__} has no dense layer (set it to 0)")

        return Seq2Seq.from_config(cfg, task)
    return SequenceModel(
        cfg.cell, task.input_size, task.output_size, cfg.hidden_size, cfg.num_layers,
        readout=task.readout, num_tokens=task.num_tokens, embedding=cfg.embedding,
        dropout=cfg.dropout, cell_options=cfg.cell_options, pool=cfg.pool, dense=cfg.dense,
    )
