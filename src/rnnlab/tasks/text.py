"""Language modelling on token streams: PTB characters, PTB words, tiny-shakespeare.

Next-token prediction with truncated BPTT, as in the usual language-model setup:

* The training stream (all tokens of the split, in order) is cut into ``B`` contiguous rows
  of equal length (the tail that does not fill a row is dropped) and read in chunks of
  ``bptt`` steps: chunk ``k`` is ``x = rows[:, k*bptt : (k+1)*bptt]`` with the targets one step
  ahead. Batches after the first of a pass have ``carry_state=True``: the trainer starts them
  from the previous chunk's final state, detached (so gradients are truncated to ``bptt``
  steps while the state runs over the whole row).
* Evaluation covers the full validation/test stream: all ``N - 1`` next-token predictions are
  split into ``B`` contiguous rows of length ``ceil((N-1)/B)`` (the last row shorter,
  the missing positions masked out), read in ``bptt`` chunks with the state carried. Every
  token after the first is predicted exactly once; each row starts from the initial state.

Metrics (means over all predicted tokens of a split, not over batches): ``loss`` (nats),
``accuracy`` (top-1), and ``bpc = loss / ln 2`` for characters or ``perplexity = exp(loss)``
for words. Two memoryless predictors (no look at the preceding tokens) are the baselines, on the
validation stream: the uniform one (``bpc = log2(V)``, ``perplexity = V``; keys ``loss``,
``bpc``/``perplexity``, ``accuracy``) and the unigram one, the training stream's token
frequencies (add-one smoothed, so a symbol unseen in training keeps a probability), far better
on text (keys ``unigram_loss``, ``unigram_bpc``/``unigram_perplexity``, ``unigram_accuracy``:
its accuracy is the most frequent training token's share).

Corpora (see docs/data.md):

* ``ptb`` characters: Mikolov's ``ptb.char.*.txt`` files, characters separated by spaces,
  ``_`` between words; the symbols are the space-separated items with the end of line kept
  as a symbol: 50 symbols.
* ``ptb`` words: ``ptb.*.txt``, whitespace-split words with ``<eos>`` at each end of line:
  10000 types (9999 words incl. ``<unk>``, plus ``<eos>``).
* ``shakespeare`` characters: tiny-shakespeare ``input.txt`` (65 characters); no official
  split exists: the first 90% of the characters train, the next 5% validate, the last 5% test.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from . import data
from .base import LN2, Batch, Task

EOS = "<eos>"
_PTB_SPLITS = {"train": "train", "val": "valid", "test": "test"}


# --- readers ---------------------------------------------------------------------------------
def read_ptb_chars(path: str | Path) -> list[str]:
    """Symbols of a Mikolov character file: the space-separated items, end of line included
    (``"a b _ c \\n d"`` -> ``["a", "b", "_", "c", "\\n", "d"]``)."""
    text = Path(path).read_text(encoding="utf-8")
    return [s for s in text.split(" ") if s]


def read_ptb_words(path: str | Path) -> list[str]:
    """Words of a Mikolov word file with ``<eos>`` at every end of line."""
    out: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            out.extend(line.split())
            out.append(EOS)
    return out


class Vocabulary:
    """Symbols <-> ids. ``from_tokens`` orders symbols by sorted value (stable across runs)."""

    def __init__(self, symbols: list[str]):
        self.itos = list(symbols)
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("vocabulary symbols must be distinct")

    @classmethod
    def from_tokens(cls, tokens: Iterable[str]) -> Vocabulary:
        return cls(sorted(set(tokens)))

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str], where: str = "") -> torch.Tensor:
        try:
            return torch.tensor([self.stoi[t] for t in tokens], dtype=torch.long)
        except KeyError as e:
            raise ValueError(
                f"symbol {e.args[0]!r}{' in ' + where if where else ''} is not in the "
                f"training vocabulary ({len(self)} symbols)"
            ) from None

    def decode(self, ids) -> list[str]:
        return [self.itos[int(i)] for i in ids]


# --- batching --------------------------------------------------------------------------------
def batchify(stream: torch.Tensor, rows: int) -> torch.Tensor:
    """(N,) -> (rows, N // rows): contiguous rows, the tail dropped (training)."""
    n = stream.numel() // rows
    if n < 2:
        raise ValueError(f"a stream of {stream.numel()} tokens is too short for {rows} rows")
    return stream[: n * rows].view(rows, n)


def eval_rows(stream: torch.Tensor, rows: int):
    """All N-1 (input, target) pairs of ``stream`` in ``rows`` contiguous rows of length
    ceil((N-1)/rows); returns ``(x, y, mask)`` of shape (rows', L) with rows' <= rows (no empty
    rows), the padding masked out."""
    n = stream.numel() - 1
    if n < 1:
        raise ValueError("an evaluation stream needs at least 2 tokens")
    L = math.ceil(n / rows)
    rows = math.ceil(n / L)
    x = torch.zeros(rows * L, dtype=torch.long)
    y = torch.zeros(rows * L, dtype=torch.long)
    mask = torch.zeros(rows * L, dtype=torch.bool)
    x[:n], y[:n], mask[:n] = stream[:-1], stream[1:], True
    return x.view(rows, L), y.view(rows, L), mask.view(rows, L)


class LanguageModelTask(Task):
    """Next-token prediction over a token stream with truncated BPTT (see module docstring).

    Subclasses fill ``self.vocab`` and ``self.streams`` ({"train","val","test"} -> (N,) long).
    ``x`` (B, bptt) token ids, ``y`` (B, bptt) next tokens; readout "all".
    """

    readout = "all"
    loss_kind = "ce"
    higher_is_better = False
    unit = "char"  # "char": bpc; "word": perplexity

    def __init__(self, bptt: int):
        if int(bptt) < 1:
            raise ValueError(f"bptt must be a positive integer, got {bptt}")
        self.bptt = int(bptt)
        self.vocab: Vocabulary
        self.streams: dict[str, torch.Tensor] = {}

    def _setup(self, vocab: Vocabulary, streams: dict[str, torch.Tensor]) -> None:
        self.vocab, self.streams = vocab, streams
        self.num_tokens = self.input_size = self.output_size = len(vocab)
        self.primary_metric = "bpc" if self.unit == "char" else "perplexity"

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        """Endless passes over the training rows; each pass starts from a fresh state."""
        rows = batchify(self.streams["train"], batch_size)
        n = rows.shape[1] - 1
        while True:
            for k, i in enumerate(range(0, n, self.bptt)):
                j = min(i + self.bptt, n)
                yield Batch(rows[:, i:j], rows[:, i + 1 : j + 1], carry_state=k > 0)

    def eval_batches(self, split: str, batch_size: int) -> Iterable[Batch]:
        self.check_split(split)
        x, y, mask = eval_rows(self.streams[split], batch_size)
        for k, i in enumerate(range(0, x.shape[1], self.bptt)):
            sl = slice(i, i + self.bptt)
            m = mask[:, sl]
            yield Batch(x[:, sl], y[:, sl], mask=None if bool(m.all()) else m, carry_state=k > 0)

    def metric_names(self) -> tuple[str, ...]:
        return (*super().metric_names(), "bpc" if self.unit == "char" else "perplexity")

    def finalize(self, means: dict[str, float]) -> dict[str, float]:
        out = dict(means)
        if "loss" in means:
            if self.unit == "char":
                out["bpc"] = means["loss"] / LN2
            else:
                out["perplexity"] = math.exp(min(means["loss"], 700.0))
        return out

    def baseline(self) -> dict[str, float]:
        """The memoryless predictors on the validation stream: uniform (loss ln V, bpc log2 V,
        perplexity V) under the metric keys, and unigram (the training frequencies, add-one
        smoothed) under ``unigram_<metric>``."""
        V = len(self.vocab)
        out = self.finalize({"loss": math.log(V), "accuracy": 1.0 / V})
        counts = torch.bincount(self.streams["train"], minlength=V).double()
        logp = ((counts + 1) / (counts.sum() + V)).log()
        targets = self.streams["val"][1:]  # every next-token prediction of the split
        unigram = self.finalize(
            {"loss": float(-logp[targets].mean()), "accuracy": float((targets == int(counts.argmax())).double().mean())}
        )
        return {**out, **{f"unigram_{k}": v for k, v in unigram.items()}}

    def metadata(self) -> dict:
        """Adds ``vocab``: the symbols in id order (``vocab[i]`` is token id i)."""
        return {**super().metadata(), "vocab": list(self.vocab.itos)}

    def describe(self) -> str:
        sizes = ", ".join(f"{k} {v.numel()}" for k, v in self.streams.items())
        return f"{self.name}: {len(self.vocab)} symbols, bptt {self.bptt}; tokens {sizes}"


class TextCharTask(LanguageModelTask):
    """Character-level language modelling; ``corpus`` is "ptb" (Mikolov's character files)
    or "shakespeare" (tiny-shakespeare, 90/5/5 split). Options: ``corpus``, ``bptt`` (150),
    ``data_dir``, ``verify``."""

    name = "text_char"
    unit = "char"

    def __init__(self, corpus: str = "ptb", bptt: int = 150, data_dir: str | None = None, verify: bool = True):
        super().__init__(bptt)
        self.corpus = corpus
        self.data_dir = data_dir
        if self.corpus == "ptb":
            tokens = {
                s: _read("ptb", f"ptb.char.{f}.txt", data_dir, verify, read_ptb_chars) for s, f in _PTB_SPLITS.items()
            }
        elif self.corpus == "shakespeare":
            text = _read(
                "tinyshakespeare", "input.txt", data_dir, verify, lambda p: Path(p).read_text(encoding="utf-8")
            )
            a, b = int(0.9 * len(text)), int(0.95 * len(text))
            tokens = {"train": list(text[:a]), "val": list(text[a:b]), "test": list(text[b:])}
            # all splits share the whole file's alphabet: a character first seen after the
            # 90% mark is still a valid symbol (tiny-shakespeare's 65 are all in the train part)
            vocab = Vocabulary.from_tokens(text)
            self._setup(vocab, {s: vocab.encode(t, s) for s, t in tokens.items()})
            return
        else:
            raise ValueError(f"unknown corpus {self.corpus!r}; expected 'ptb' or 'shakespeare'")
        vocab = Vocabulary.from_tokens(tokens["train"])
        self._setup(vocab, {s: vocab.encode(t, f"the {s} split") for s, t in tokens.items()})


def _read(dataset: str, file: str, data_dir, verify: bool, reader):
    """``reader(path)`` of a verified dataset file; read errors name the file and the fix."""
    path = data.require(dataset, file, data_dir, check_hash=verify)
    with data.reading(dataset, file, path, data_dir):
        return reader(path)


class PTBCharTask(TextCharTask):
    """Penn Treebank characters (Mikolov): 50 symbols, BPC. Options: ``bptt`` (150),
    ``data_dir``, ``verify``."""

    name = "ptb_char"

    def __init__(self, bptt: int = 150, data_dir: str | None = None, verify: bool = True):
        super().__init__("ptb", bptt, data_dir, verify)


class PTBWordTask(LanguageModelTask):
    """Penn Treebank words (Mikolov): 10000 types incl. ``<eos>``, perplexity. Options:
    ``bptt`` (35), ``data_dir``, ``verify``."""

    name = "ptb_word"
    unit = "word"

    def __init__(self, bptt: int = 35, data_dir: str | None = None, verify: bool = True):
        super().__init__(bptt)
        self.data_dir = data_dir
        tokens = {s: _read("ptb", f"ptb.{f}.txt", data_dir, verify, read_ptb_words) for s, f in _PTB_SPLITS.items()}
        vocab = Vocabulary.from_tokens(tokens["train"])
        self._setup(vocab, {s: vocab.encode(t, f"the {s} split") for s, t in tokens.items()})
