"""Sentence translation on ManyThings/Tatoeba pairs (spa-eng, deu-eng, por-eng when present).

Data: ``tatoeba/<pair>.zip`` holds ``<lang>.txt`` with one pair per line, tab-separated,
English first (later releases add a third, attribution column, which is ignored). The task
translates the other language into English (``reverse=True``: English into the other one).

Pipeline, all deterministic:

1. Tokenise each side: Unicode NFC, lower case, tokens = words (letters/digits, with an inner
   apostrophe kept: ``don't``) and single punctuation marks (``¿ ¡ . , ?`` ...).
2. Drop pairs with an empty side or a side longer than ``max_len`` tokens.
3. Shuffle with ``numpy.random.RandomState(split_seed)``; keep the first ``max_pairs`` when it
   is positive; the first ``test_size`` pairs are the test split, the next ``val_size`` the
   validation split, the rest train.
4. Vocabularies from the training split only, one per side: tokens seen at least
   ``min_freq`` times, sorted by frequency then text, after the specials ``<pad>`` 0,
   ``<sos>`` 1, ``<eos>`` 2, ``<unk>`` 3.

Batches: ``x`` (B, S) source ids (padded with 0), ``lengths`` (B,) source lengths; the decoder
input ``extra["tgt_in"]`` (B, T) is ``<sos> y_1 ... y_n`` and the target ``y`` (B, T) is
``y_1 ... y_n <eos>``, with ``mask`` marking the real positions. Teacher forcing: with ratio
``r`` the decoder is fed the ground-truth previous token with probability ``r`` at each step
and otherwise its own previous greedy prediction (so 1.0 = always ground truth, 0.0 = always
its own prediction); training batches carry the draw as ``extra["teacher_mask"]`` (B, T) bool
drawn with the trainer's generator (absent when r = 1). Evaluation is teacher-forced.

Metrics (pooled over all target tokens of a split, ``<eos>`` included): ``loss`` (nats per
token), ``perplexity = exp(loss)``, ``accuracy`` (next-token top-1); ``bleu`` (corpus BLEU-4,
0-100, single reference, on these lowercase tokens, from greedy decoding) comes from
:meth:`TranslationTask.model_metrics`, which needs the model.
"""

from __future__ import annotations

import math
import re
import unicodedata
import zipfile
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from . import data
from .base import Batch, Task

PAD, SOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ["<pad>", "<sos>", "<eos>", "<unk>"]
PAIRS = ("spa-eng", "deu-eng", "por-eng")
_TOKEN = re.compile(r"\w+(?:'\w+)*|[^\w\s]", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """NFC, lower case, words (inner apostrophes kept) and single punctuation marks."""
    return _TOKEN.findall(unicodedata.normalize("NFC", text).lower())


def read_pairs(path: str | Path) -> list[tuple[str, str]]:
    """(english, other) sentence pairs from a ManyThings zip (or a plain tab-separated file)."""
    path = Path(path)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith(".txt") and not Path(n).name.startswith("_")]
            if len(names) != 1:
                raise ValueError(f"{path}: expected one sentence file besides _about.txt, found {names}")
            text = z.read(names[0]).decode("utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    pairs = []
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise ValueError(f"{path}: line {i + 1} has no tab-separated pair: {line[:80]!r}")
        pairs.append((cols[0], cols[1]))
    return pairs


def _sacrebleu():
    try:
        from sacrebleu.metrics import BLEU
    except ImportError:
        raise ImportError(
            "the translation task scores BLEU with sacrebleu, the package published BLEU is computed with: "
            "pip install 'rnnlab[translation]'"
        ) from None
    return BLEU


def corpus_bleu(candidates: Sequence[Sequence[str]], references: Sequence[Sequence[str]], max_n: int = 4) -> float:
    """Corpus BLEU (Papineni et al. 2002) of tokenised sentences, one reference per sentence,
    uniform weights, no smoothing, computed by sacrebleu on the tokens as given (``tokenize="none"``:
    our tokeniser has already split them); returns a value in [0, 1].

    ``p_n`` = sum over sentences of clipped n-gram matches / sum of candidate n-grams;
    ``BP = exp(1 - r / c)`` when the total candidate length c is below the total reference
    length r, else 1; ``BLEU = BP * exp(mean_n ln p_n)``, 0 when any ``p_n`` is 0.
    """
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} references")
    if not candidates or not any(candidates):
        return 0.0
    bleu = _sacrebleu()(tokenize="none", smooth_method="none", max_ngram_order=max_n, effective_order=False, force=True)
    score = bleu.corpus_score([" ".join(c) for c in candidates], [[" ".join(r) for r in references]])
    return min(1.0, max(0.0, score.score / 100.0))


class TokenVocab:
    def __init__(self, counts: Counter, min_freq: int):
        kept = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        self.itos = SPECIALS + kept
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.stoi.get(t, UNK) for t in tokens]

    def decode(self, ids) -> list[str]:
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i not in (PAD, SOS):
                out.append(self.itos[i])
        return out


class TranslationTask(Task):
    """Encoder-decoder translation (``model_kind = "seq2seq"``).

    Options: ``pair`` ("spa-eng" | "deu-eng" | "por-eng"), ``reverse`` (False: other -> English),
    ``max_len`` (15 tokens per side), ``min_freq`` (2), ``max_pairs`` (0 = all), ``val_size``
    (2000), ``test_size`` (2000), ``split_seed`` (0), ``teacher_forcing`` (1.0), ``bleu_size``
    (0 = the whole split; else BLEU on the first ``bleu_size`` pairs), ``data_dir``, ``verify``.
    Sizes for the model: ``num_tokens``/``input_size`` = source vocabulary,
    ``output_size``/``tgt_num_tokens`` = target vocabulary.
    """

    name = "translation"
    model_kind = "seq2seq"
    readout = "all"
    loss_kind = "ce"
    primary_metric = "perplexity"
    higher_is_better = False
    bos_id, eos_id, pad_id = SOS, EOS, PAD

    def __init__(
        self,
        pair: str = "spa-eng",
        reverse: bool = False,
        max_len: int = 15,
        min_freq: int = 2,
        max_pairs: int = 0,
        val_size: int = 2000,
        test_size: int = 2000,
        split_seed: int = 0,
        teacher_forcing: float = 1.0,
        bleu_size: int = 0,
        data_dir: str | None = None,
        verify: bool = True,
    ):
        if pair not in PAIRS:
            raise ValueError(f"unknown pair {pair!r}; expected one of {PAIRS}")
        _sacrebleu()  # before the data is read: its BLEU needs the extra
        if not 0.0 <= float(teacher_forcing) <= 1.0:
            raise ValueError(
                f"teacher_forcing is a probability in [0, 1] (1.0 = always feed the ground truth), got {teacher_forcing}"
            )
        for key, v in (("max_len", max_len), ("min_freq", min_freq)):
            if int(v) < 1:
                raise ValueError(f"{key} must be a positive integer, got {v}")
        self.pair, self.reverse = pair, bool(reverse)
        self.max_len, self.min_freq, self.max_pairs = int(max_len), int(min_freq), int(max_pairs)
        self.split_seed, self.teacher_forcing, self.bleu_size = int(split_seed), float(teacher_forcing), int(bleu_size)
        self.data_dir = data_dir
        path = data.require("tatoeba", f"{pair}.zip", data_dir, check_hash=verify)
        pairs = []
        with data.reading("tatoeba", f"{pair}.zip", path, data_dir):
            raw_pairs = read_pairs(path)
        for eng, other in raw_pairs:
            src, tgt = (tokenize(eng), tokenize(other)) if self.reverse else (tokenize(other), tokenize(eng))
            if 0 < len(src) <= self.max_len and 0 < len(tgt) <= self.max_len:
                pairs.append((src, tgt))
        order = np.random.RandomState(self.split_seed).permutation(len(pairs))
        if self.max_pairs > 0:
            order = order[: self.max_pairs]
        n = len(order)
        if int(val_size) < 1 or int(test_size) < 1 or int(val_size) + int(test_size) >= n:
            raise ValueError(
                f"val_size={val_size} and test_size={test_size} must be positive and leave training "
                f"pairs out of the {n} usable pairs"
            )
        t, v = int(test_size), int(val_size)
        split_idx = {"test": order[:t], "val": order[t : t + v], "train": order[t + v :]}
        raw = {s: [pairs[i] for i in idx] for s, idx in split_idx.items()}
        self.src_vocab = TokenVocab(Counter(tok for s, _ in raw["train"] for tok in s), self.min_freq)
        self.tgt_vocab = TokenVocab(Counter(tok for _, g in raw["train"] for tok in g), self.min_freq)
        self.raw = raw
        self.data = {s: [(self.src_vocab.encode(a), self.tgt_vocab.encode(b)) for a, b in ps] for s, ps in raw.items()}
        self.num_tokens = self.input_size = len(self.src_vocab)
        self.output_size = self.tgt_num_tokens = len(self.tgt_vocab)

    # --- batching -------------------------------------------------------------------------
    def _make(self, items: list[tuple[list[int], list[int]]], generator: torch.Generator | None = None) -> Batch:
        B = len(items)
        S = max(len(a) for a, _ in items)
        T = max(len(b) for _, b in items) + 1
        x = torch.full((B, S), PAD, dtype=torch.long)
        y = torch.full((B, T), PAD, dtype=torch.long)
        tgt_in = torch.full((B, T), PAD, dtype=torch.long)
        mask = torch.zeros(B, T, dtype=torch.bool)
        lengths = torch.empty(B, dtype=torch.long)
        for i, (a, b) in enumerate(items):
            x[i, : len(a)] = torch.tensor(a)
            lengths[i] = len(a)
            tgt_in[i, : len(b) + 1] = torch.tensor([SOS] + b)
            y[i, : len(b) + 1] = torch.tensor(b + [EOS])
            mask[i, : len(b) + 1] = True
        extra = {"tgt_in": tgt_in}
        if generator is not None and self.teacher_forcing < 1.0:
            extra["teacher_mask"] = torch.rand(B, T, generator=generator) < self.teacher_forcing
        return Batch(x, y, lengths=lengths, mask=mask, extra=extra)

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        items = self.data["train"]
        n = len(items)
        bs = min(int(batch_size), n)
        while True:
            order = torch.randperm(n, generator=generator).tolist()
            for i in range(0, n - bs + 1, bs):
                yield self._make([items[j] for j in order[i : i + bs]], generator)

    def eval_batches(self, split: str, batch_size: int) -> Iterable[Batch]:
        self.check_split(split)
        items = self.data[split]
        for i in range(0, len(items), batch_size):
            yield self._make(items[i : i + batch_size])

    def metric_names(self) -> tuple[str, ...]:
        return (*super().metric_names(), "perplexity", "bleu")

    def finalize(self, means: dict[str, float]) -> dict[str, float]:
        out = dict(means)
        if "loss" in means:
            out["perplexity"] = math.exp(min(means["loss"], 700.0))
        return out

    def baseline(self) -> dict[str, float]:
        """The uniform predictor over the target vocabulary."""
        V = len(self.tgt_vocab)
        return {"loss": math.log(V), "perplexity": float(V), "accuracy": 1.0 / V}

    # --- decoding and BLEU ----------------------------------------------------------------
    @torch.no_grad()
    def translate(self, model, split: str, batch_size: int = 256, limit: int = 0) -> list[list[str]]:
        """Greedy decodes (target tokens) of the pairs of ``split``; ``model.generate(x,
        lengths, max_len)`` must return (B, <= max_len) token ids."""
        self.check_split(split)
        items = self.data[split][: limit or None]
        device = next(model.parameters()).device
        out: list[list[str]] = []
        was_training = model.training
        model.eval()
        try:
            for i in range(0, len(items), batch_size):
                b = self._make(items[i : i + batch_size])
                ids = model.generate(b.x.to(device), b.lengths, max_len=self.max_len + 1)
                out.extend(self.tgt_vocab.decode(row) for row in ids.tolist())
        finally:
            model.train(was_training)
        return out

    def model_metrics(self, model, split: str, batch_size: int = 256) -> dict[str, float]:
        """BLEU-4 (0-100) of greedy decodes against the reference tokens of ``split``."""
        limit = self.bleu_size
        hyps = self.translate(model, split, batch_size, limit)
        refs = [g for _, g in self.raw[split][: len(hyps)]]
        return {"bleu": 100.0 * corpus_bleu(hyps, refs)}

    def metadata(self) -> dict:
        """Adds both vocabularies in id order (``src_vocab[i]`` is source id i) and the
        special ids the decoder needs."""
        return {
            **super().metadata(),
            "src_vocab": list(self.src_vocab.itos),
            "tgt_vocab": list(self.tgt_vocab.itos),
            "tgt_num_tokens": self.tgt_num_tokens,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
        }

    def describe(self) -> str:
        sizes = ", ".join(f"{s} {len(v)}" for s, v in self.data.items())
        d = "eng -> other" if self.reverse else "other -> eng"
        return (
            f"translation[{self.pair}, {d}]: vocab src {len(self.src_vocab)} / tgt {len(self.tgt_vocab)}, "
            f"max_len {self.max_len}, teacher_forcing {self.teacher_forcing}; pairs {sizes}"
        )
