"""The models the trainer builds: encoder -> recurrent layer -> readout (``SequenceModel``)
and the encoder-decoder for sequence-to-sequence tasks (``Seq2Seq``), from a ModelConfig and
a task's sizes. :class:`Model` states what the trainer needs of either.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from .cells import CELLS, Recurrent
from .config import EMBEDDING_INITS, READOUT_INITS, ModelConfig
from .kernels import ensemble as ensemble_kernels
from .kernels.linear import tall_linear
from .tasks.base import Batch, Task


@runtime_checkable
class Model(Protocol):
    """What the trainer needs of a model (both models here provide all of it).

    ``forward_batch(batch, state)`` -> ``(out, state)``: the model on a task's batch;
    ``param_groups()``: the parameters by optimizer group tag (``"default"``, ``"orthogonal"``,
    ...); ``group_scales()``: learning-rate / weight-decay factors per tag (DMU's 1 / (2 n));
    ``regularization()``: a loss term to add, or None; ``parameter_counts()``: ``{"free": ...,
    "elements": ...}``.
    """

    def forward_batch(self, batch: Batch, state=None): ...

    def param_groups(self) -> dict[str, list[nn.Parameter]]: ...

    def group_scales(self) -> dict[str, float]: ...

    def regularization(self) -> Tensor | None: ...

    def parameter_counts(self) -> dict[str, int]: ...


class OneHot(nn.Module):
    """Token ids (any shape) -> float one-hot vectors of ``num_tokens`` (a fixed encoder)."""

    def __init__(self, num_tokens: int):
        super().__init__()
        self.num_tokens = num_tokens

    def forward(self, x: Tensor) -> Tensor:
        # the rows of an identity matrix: one_hot(x).float()'s values, written once (one_hot
        # writes int64 and .float() converts: measured 2.7x slower for 51 x 32 x 105 x 100)
        return nn.functional.embedding(x, torch.eye(self.num_tokens, device=x.device))


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


def init_encoder_readout(model: nn.Module, embedding_init: str = "default", readout_init: str = "default") -> None:
    """Apply ``model.embedding_init`` / ``model.readout_init`` to ``model.encoder`` (an
    ``nn.Embedding``; a one-hot encoder has nothing to initialise) and ``model.readout``."""
    if embedding_init not in EMBEDDING_INITS:
        raise ValueError(f"embedding_init must be one of {EMBEDDING_INITS}, got {embedding_init!r}")
    if readout_init not in READOUT_INITS:
        raise ValueError(f"readout_init must be one of {READOUT_INITS}, got {readout_init!r}")
    with torch.no_grad():
        if embedding_init == "uniform0.1" and isinstance(model.encoder, nn.Embedding):
            model.encoder.weight.uniform_(-0.1, 0.1)
        if readout_init == "xavier":
            nn.init.xavier_normal_(model.readout.weight)
        elif readout_init == "uniform0.1":
            model.readout.weight.uniform_(-0.1, 0.1)
            model.readout.bias.zero_()
        elif readout_init == "kaiming":  # torch's defaults: fan-in, gain sqrt(2)
            nn.init.kaiming_normal_(model.readout.weight)


class SequenceModel(nn.Module):
    """``x`` (B, T) tokens or (B, T, I) features -> encoder -> ``Recurrent`` -> linear readout.

    ``forward(x, state=None, lengths=None) -> (out, state)`` with ``out`` (B, T, O) for
    ``readout="all"`` and (B, O) for ``"last"`` (the output at each sequence's last valid step).
    """

    def __init__(
        self,
        cell: str,
        input_size: int,
        output_size: int,
        hidden_size: int | list[int],
        num_layers: int = 1,
        readout: str = "all",
        num_tokens: int | None = None,
        embedding: int = 0,
        dropout: float = 0.0,
        cell_options: dict | None = None,
        pool: int = 0,
        dense: int = 0,
        dense_activation: str = "none",
        embedding_init: str = "default",
        readout_init: str = "default",
    ):
        super().__init__()
        width = hidden_size[-1] if isinstance(hidden_size, (list, tuple)) and hidden_size else hidden_size
        if pool < 0 or (pool and width % pool):
            raise ValueError(f"pool must be 0 (off) or divide the last layer's width {width}, got {pool}")
        cell_class = CELLS.resolve(cell)  # a key, "package.module:Class" or an entry point
        if readout not in ("all", "last"):
            raise ValueError(f"readout must be 'all' or 'last', got {readout!r}")
        if num_tokens:
            self.encoder = nn.Embedding(num_tokens, embedding) if embedding > 0 else OneHot(num_tokens)
            input_size = embedding if embedding > 0 else num_tokens
        else:
            self.encoder = nn.Identity()
        self.readout_kind = readout
        self.rnn = Recurrent(
            input_size,
            hidden_size,
            num_layers,
            batch_first=True,
            dropout=dropout,
            cell=cell_class,
            **(cell_options or {}),
        )
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.pool = L2Pool(pool) if pool else nn.Identity()
        # the last layer's width (per-layer widths), doubled for cell_options bidirectional=true
        width = self.rnn.num_directions * self.rnn.hidden_size
        features = width + (width // pool if pool else 0)
        if dense < 0:
            raise ValueError(f"dense must be >= 0 (0 = no dense layer), got {dense}")
        # DMU's NatLang: a dense layer of 100 units between the recurrent block and the softmax;
        # the paper names no activation, so it is linear by default (a low-rank factor of the
        # readout); dense_activation="relu" follows it with a ReLU, as the DMU authors' released
        # code does (deep_memory_update/models/base_model.py:224-233 at d4d7a8e)
        if dense_activation not in ("none", "relu"):
            raise ValueError(f"dense_activation must be 'none' or 'relu', got {dense_activation!r}")
        if dense_activation != "none" and not dense:
            raise ValueError(f"dense_activation={dense_activation!r} needs a dense layer (dense > 0)")
        self.dense = nn.Linear(features, dense) if dense else nn.Identity()
        if dense_activation == "relu":
            self.dense = nn.Sequential(self.dense, nn.ReLU())
        self.readout = nn.Linear(dense or features, output_size)
        init_encoder_readout(self, embedding_init, readout_init)

    def forward(self, x: Tensor, state=None, lengths: Tensor | None = None):
        # With nothing between the recurrent layer and the linear readout (no dropout while
        # training, no pooling), cells that compute in other coordinates (asRNN: g = W_f h)
        # hand their map M over and the readout uses W_o M (Recurrent.forward_mapped).
        direct = (
            isinstance(self.pool, nn.Identity)
            and isinstance(self.dense, nn.Identity)
            and (isinstance(self.drop, nn.Identity) or not self.training)
        )
        inputs = self._encode(x, lengths)
        if direct:
            out, state, M = self.rnn.forward_mapped(inputs, state, lengths)
        else:
            (out, state), M = self.rnn(inputs, state, lengths), None
        if self.readout_kind == "last":
            if lengths is None:
                out = out[:, -1]
            else:
                out = out[torch.arange(out.shape[0]), torch.as_tensor(lengths).to(out.device) - 1]
        # (tall_linear: the same product as nn.Linear, faster over T * B rows on CPU)
        if M is not None:
            return tall_linear(out, self.readout.weight @ M, self.readout.bias), state
        return tall_linear(self.dense(self.pool(self.drop(out))), self.readout.weight, self.readout.bias), state

    def _encode(self, x: Tensor, lengths: Tensor | None) -> Tensor:
        """The encoder's output; where the first layer reads its input through
        ``batched_linear`` alone (:meth:`rnnlab.cells.Recurrent.reads_tokens`: its compiled
        loops, in a single run or an ensemble's batched model), one-hot inputs come as a
        stand-in that carries the tokens (:func:`rnnlab.kernels.ensemble.one_hot_stand_in`: the
        first layer gathers its weight's columns instead of multiplying one-hot rows; the same
        values)."""
        if (
            ensemble_kernels.TOKEN_INPUTS
            and isinstance(self.encoder, OneHot)
            and x.dim() == 2
            and not x.is_floating_point()
        ):
            stand_in = ensemble_kernels.one_hot_stand_in(x, self.encoder.num_tokens, torch.get_default_dtype())
            if self.rnn.reads_tokens(stand_in, lengths):
                return stand_in
        return self.encoder(x)

    def forward_batch(self, batch: Batch, state=None):
        """The trainer's entry point: ``batch.x`` with its ``lengths``."""
        return self(batch.x, state, batch.lengths)

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
        free = elements - rnn_elements + self.rnn.free_parameter_count()
        return {"free": free, "elements": elements, **getattr(self, "matched_size", {})}


def _encoder(num_tokens: int, embedding: int) -> tuple[nn.Module, int]:
    if embedding > 0:
        return nn.Embedding(num_tokens, embedding), embedding
    return OneHot(num_tokens), num_tokens


class Seq2Seq(nn.Module):
    """Encoder-decoder for sequence-to-sequence tasks, built from any registered cell::

        encoder:  h^e_s = cell_e(E_src x_s, h^e_{s-1}),  s = 1..S (each sequence to its own length)
        decoder:  h^d_0 = h^e_{S}  (the encoder's final state, every layer; no attention)
                  h^d_t = cell_d(E_tgt u_t, h^d_{t-1}),  logits_t = W_o h^d_t + b_o

    where ``u_1 = <sos>`` and, for t > 1, ``u_t`` is the ground-truth previous token where
    ``teacher_mask[:, t]`` is True and the decoder's own previous greedy prediction elsewhere
    (teacher forcing ratio 1.0 = always the ground truth). Both recurrences are ``Recurrent``
    layers (column form ``h_t = f(W_hh h_{t-1} + W_xh x_t + b)`` inside each cell).

    ``Seq2Seq(cell, src_vocab, tgt_vocab, hidden_size, num_layers=1, embedding=0,
    dropout=0.0, cell_options=None, bos_id=1, eos_id=2)``; ``embedding`` > 0: learned
    embeddings of that size on both sides; 0: one-hot inputs. Shapes: source ``x`` (B, S) ids,
    ``lengths`` (B,), decoder input ``tgt_in`` (B, T) ids; output logits (B, T, V_tgt).

    ``forward(x, state=None, lengths=None, tgt_in=..., teacher_mask=None) -> (logits, state)``
    and ``forward_batch(batch, state=None)`` (the same, reading a translation ``Batch``)
    (``state`` is ignored on input: each pair starts from zero; the decoder's final state is
    returned); ``generate(x, lengths, max_len) -> (B, max_len)`` greedy ids.
    """

    def __init__(
        self,
        cell: str,
        src_vocab: int,
        tgt_vocab: int,
        hidden_size: int,
        num_layers: int = 1,
        embedding: int = 0,
        dropout: float = 0.0,
        cell_options: dict | None = None,
        bos_id: int = 1,
        eos_id: int = 2,
    ):
        super().__init__()
        cell_class = CELLS.resolve(cell)
        self.bos_id, self.eos_id = int(bos_id), int(eos_id)
        self.src_embed, e_src = _encoder(src_vocab, embedding)
        self.tgt_embed, e_tgt = _encoder(tgt_vocab, embedding)
        opts = dict(cell_options or {})
        if opts.get("bidirectional"):
            raise ValueError(
                "bidirectional=True is not supported by the encoder-decoder (a backward "
                "decoder would read the targets it predicts); remove it from model.cell_options"
            )
        self.encoder = Recurrent(
            e_src, hidden_size, num_layers, batch_first=True, dropout=dropout, cell=cell_class, **opts
        )
        self.decoder = Recurrent(
            e_tgt, hidden_size, num_layers, batch_first=True, dropout=dropout, cell=cell_class, **opts
        )
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.readout = nn.Linear(self.decoder.hidden_size, tgt_vocab)

    @classmethod
    def from_config(cls, cfg, task) -> Seq2Seq:
        """From a ``ModelConfig`` (cell, hidden_size, num_layers, embedding, dropout,
        cell_options) and a task with ``num_tokens`` (source), ``output_size`` (target)."""
        return cls(
            cfg.cell,
            task.num_tokens,
            task.output_size,
            cfg.hidden_size,
            cfg.num_layers,
            embedding=cfg.embedding,
            dropout=cfg.dropout,
            cell_options=cfg.cell_options,
            bos_id=getattr(task, "bos_id", 1),
            eos_id=getattr(task, "eos_id", 2),
        )

    def encode(self, x: Tensor, lengths: Tensor | None):
        _, state = self.encoder(self.src_embed(x), None, lengths)
        return state

    def forward(
        self,
        x: Tensor,
        state=None,
        lengths: Tensor | None = None,
        tgt_in: Tensor | None = None,
        teacher_mask: Tensor | None = None,
        **_ignored,
    ):
        if tgt_in is None:
            raise ValueError(
                "Seq2Seq needs the decoder input: call model(x, state, lengths, **batch.extra) "
                "with batch.extra['tgt_in'] (B, T)"
            )
        state = self.encode(x, lengths)
        if teacher_mask is None or bool(teacher_mask[:, 1:].all()):
            out, state = self.decoder(self.tgt_embed(tgt_in), state)
            return self.readout(self.drop(out)), state
        # scheduled feeding: step by step, choosing per example between truth and prediction
        teacher_mask = teacher_mask.to(tgt_in.device)
        logits = []
        inp = tgt_in[:, 0]
        for t in range(tgt_in.shape[1]):
            if t > 0:
                pred = logits[-1].argmax(-1)
                inp = torch.where(teacher_mask[:, t], tgt_in[:, t], pred)
            out, state = self.decoder(self.tgt_embed(inp[:, None]), state)
            logits.append(self.readout(self.drop(out[:, 0])))
        return torch.stack(logits, 1), state

    def forward_batch(self, batch, state=None):
        """The trainer's entry point: ``batch.x`` source ids, ``batch.lengths`` source lengths,
        ``batch.extra`` with ``tgt_in`` (and ``teacher_mask`` when teacher forcing < 1)."""
        extra = batch.extra
        return self(batch.x, state, batch.lengths, tgt_in=extra.get("tgt_in"), teacher_mask=extra.get("teacher_mask"))

    @torch.no_grad()
    def generate(self, x: Tensor, lengths: Tensor | None = None, max_len: int = 20) -> Tensor:
        """Greedy decoding from ``<sos>``; stops early once every row has emitted ``<eos>``."""
        state = self.encode(x, lengths)
        inp = torch.full((x.shape[0],), self.bos_id, dtype=torch.long, device=x.device)
        done = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
        out = []
        for _ in range(max_len):
            h, state = self.decoder(self.tgt_embed(inp[:, None]), state)
            inp = self.readout(h[:, 0]).argmax(-1)
            out.append(inp)
            done |= inp == self.eos_id
            if bool(done.all()):
                break
        return torch.stack(out, 1)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        groups: dict[str, list[nn.Parameter]] = {}
        for layer in (self.encoder, self.decoder):
            for tag, ps in layer.param_groups().items():
                groups.setdefault(tag, []).extend(ps)
        inner = {id(p) for ps in groups.values() for p in ps}
        groups.setdefault("default", []).extend(p for p in self.parameters() if id(p) not in inner)
        return groups

    def regularization(self):
        terms = [r for r in (self.encoder.regularization(), self.decoder.regularization()) if r is not None]
        return sum(terms) if terms else None

    def parameter_counts(self) -> dict[str, int]:
        elements = sum(p.numel() for p in self.parameters())
        rnn = sum(p.numel() for layer in (self.encoder, self.decoder) for p in layer.parameters())
        free = elements - rnn + self.encoder.free_parameter_count() + self.decoder.free_parameter_count()
        return {"free": free, "elements": elements, **getattr(self, "matched_size", {})}

    def group_scales(self) -> dict[str, float]:
        # no per-group scaling here so far (the sequence model forwards its layer's): kept as
        # it was, so encoder-decoder runs train as before
        return {}


def build_model(cfg: ModelConfig, task: Task) -> nn.Module:
    """The model a task needs: tasks with ``model_kind = "seq2seq"`` get an encoder-decoder.
    With ``cfg.params`` (a parameter budget) the width is solved for first (rnnlab.sizing), and
    ``parameter_counts()`` reports the budget and the width obtained."""
    if cfg.params:
        from .sizing import matched

        cfg, sizing = matched(cfg, task, build_model)
        model = build_model(cfg, task)
        model.matched_size = sizing
        return model
    if task.model_kind == "seq2seq":
        if cfg.dense:
            raise ValueError(
                f"model.dense={cfg.dense} applies to sequence models only; the "
                f"encoder-decoder of task {type(task).__name__} has no dense layer (set it to 0)"
            )
        if (cfg.embedding_init, cfg.readout_init) != ("default", "default"):
            raise ValueError(
                "model.embedding_init / model.readout_init apply to sequence models only; set them to 'default'"
            )
        return Seq2Seq.from_config(cfg, task)
    return SequenceModel(
        cfg.cell,
        task.input_size,
        task.output_size,
        cfg.hidden_size,
        cfg.num_layers,
        readout=task.readout,
        num_tokens=task.num_tokens,
        embedding=cfg.embedding,
        dropout=cfg.dropout,
        cell_options=cfg.cell_options,
        pool=cfg.pool,
        dense=cfg.dense,
        dense_activation=cfg.dense_activation,
        embedding_init=cfg.embedding_init,
        readout_init=cfg.readout_init,
    )
