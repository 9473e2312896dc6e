"""Polyphonic music: next-frame prediction on 88-key piano rolls (Boulanger-Lewandowski et al.,
ICML 2012: JSB Chorales, MuseData, Nottingham, Piano-midi.de).

A piece is a binary matrix ``v`` of shape (T, 88) (keys MIDI 21-108). The model sees frames
``0, v_1, ..., v_{T-1}`` (an all-zero start frame first) and predicts ``v_1, ..., v_T`` with 88
independent sigmoid outputs (``loss_kind = "bce"``), so every frame of every piece is
predicted, the first one from the initial state alone; ``predict_first=False`` drops the
start frame and predicts frames 2..T only (the convention of several later codebases).

Frame-level negative log-likelihood, as Boulanger-Lewandowski et al. report it:

    NLL = (sum over all predicted frames t of all pieces of the split of
           sum over the 88 keys k of -[v_tk ln p_tk + (1 - v_tk) ln(1 - p_tk)])
          / (number of predicted frames of the split)

i.e. summed over keys within a frame and averaged over all frames of the split (pooled, so a
long piece weighs more than a short one; not a mean of per-piece means). ``loss`` and
``nll`` are this quantity; the training loss is the same per-frame sum averaged over the
frames of a batch. A constant 0.5 predictor scores ``88 ln 2 = 60.997`` nats per frame.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import data
from .base import Batch, Task

KEYS = 88
MUSIC_FILES = {
    "jsb": "JSB_Chorales.mat",
    "musedata": "MuseData.mat",
    "nottingham": "Nottingham.mat",
    "piano": "Piano_midi.mat",
}
_MAT_SPLITS = {"train": "traindata", "val": "validdata", "test": "testdata"}


def load_piano_rolls(path: str | Path) -> dict[str, list[np.ndarray]]:
    """Read a ``.mat`` file holding ``traindata``/``validdata``/``testdata`` (1 x N cell arrays
    of (T, 88) 0/1 matrices) into ``{"train"|"val"|"test": [uint8 (T, 88), ...]}``."""
    try:
        from scipy.io import loadmat
    except ImportError as e:  # scipy is an optional dependency
        raise ImportError(
            "the music task reads .mat files with scipy, which is not installed; "
            "install it with `pip install scipy` or `pip install rnnlab[science]`"
        ) from e
    mat = loadmat(str(path))
    out = {}
    for split, key in _MAT_SPLITS.items():
        if key not in mat:
            raise ValueError(
                f"{path} has no variable {key!r}; found {sorted(k for k in mat if not k.startswith('__'))}"
            )
        cells = np.asarray(mat[key]).reshape(-1)
        rolls = []
        for i, c in enumerate(cells):
            a = np.asarray(c)
            if a.ndim != 2 or a.shape[1] != KEYS:
                raise ValueError(f"{path}: {key}[{i}] has shape {a.shape}; expected (T, {KEYS})")
            if a.size and not np.isin(a, (0, 1)).all():
                raise ValueError(f"{path}: {key}[{i}] holds values other than 0 and 1")
            rolls.append(a.astype(np.uint8))
        out[split] = rolls
    return out


class MusicTask(Task):
    """Polyphonic next-frame prediction. Options: ``dataset`` in {nottingham, jsb, musedata,
    piano} (not ``name``: in a preset, ``[task] name`` is the registry key "music"),
    ``predict_first`` (True), ``max_train_len`` (0 = whole pieces; else training batches take a random window of at most this many frames from each piece, to bound memory
    on the long Piano-midi/MuseData pieces; evaluation always uses whole pieces),
    ``data_dir``, ``verify``.

    ``x`` (B, T, 88) float, ``y`` (B, T, 88) float targets, ``lengths`` (B,); padding beyond a
    piece's length is excluded by the lengths mask. Metric ``nll`` (= ``loss``) in nats per
    frame, as in the module docstring.
    """

    name = "music"
    readout = "all"
    loss_kind = "bce"
    primary_metric = "nll"
    higher_is_better = False
    input_size = KEYS
    output_size = KEYS

    def __init__(
        self,
        dataset: str = "nottingham",
        predict_first: bool = True,
        max_train_len: int = 0,
        data_dir: str | None = None,
        verify: bool = True,
    ):
        if dataset not in MUSIC_FILES:
            raise ValueError(f"unknown music dataset {dataset!r}; expected one of {sorted(MUSIC_FILES)}")
        if int(max_train_len) < 0:
            raise ValueError(f"max_train_len must be >= 0 (0 = whole pieces), got {max_train_len}")
        self.dataset = dataset
        self.predict_first = bool(predict_first)
        self.max_train_len = int(max_train_len)
        self.data_dir = data_dir
        path = data.require("polyphonic", MUSIC_FILES[dataset], data_dir, check_hash=verify)
        with data.reading("polyphonic", MUSIC_FILES[dataset], path, data_dir):
            rolls = load_piano_rolls(path)
        min_len = 1 if self.predict_first else 2
        self.pieces = {s: [torch.from_numpy(r) for r in rs if len(r) >= min_len] for s, rs in rolls.items()}
        for s, ps in self.pieces.items():
            if not ps:
                raise ValueError(f"{path}: the {s} split has no piece of at least {min_len} frames")

    # --- batching -------------------------------------------------------------------------
    def _make(self, pieces: list[torch.Tensor]) -> Batch:
        """Pad pieces into (x, y, lengths); x is y shifted right by one frame."""
        xs, ys = [], []
        for p in pieces:
            p = p.float()
            if self.predict_first:
                xs.append(torch.cat([torch.zeros(1, KEYS), p[:-1]]))
                ys.append(p)
            else:
                xs.append(p[:-1])
                ys.append(p[1:])
        lengths = torch.tensor([len(y) for y in ys], dtype=torch.long)
        T = int(lengths.max())
        x = torch.zeros(len(ys), T, KEYS)
        y = torch.zeros(len(ys), T, KEYS)
        for i, (a, b) in enumerate(zip(xs, ys)):
            x[i, : len(a)] = a
            y[i, : len(b)] = b
        return Batch(x, y, lengths=lengths)

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        """Epochs over the training pieces in a random order (``generator``); the last
        incomplete batch of an epoch is kept only when it is the whole epoch."""
        pieces = self.pieces["train"]
        n = len(pieces)
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        bs = min(batch_size, n)
        while True:
            order = torch.randperm(n, generator=generator).tolist()
            for i in range(0, n - bs + 1, bs):
                chosen = [pieces[j] for j in order[i : i + bs]]
                if self.max_train_len:
                    # +1: a window of W+1 frames gives W predictions when the start frame is off
                    W = self.max_train_len + (0 if self.predict_first else 1)
                    cut = []
                    for p in chosen:
                        if len(p) > W:
                            s = int(torch.randint(0, len(p) - W + 1, (1,), generator=generator))
                            p = p[s : s + W]
                        cut.append(p)
                    chosen = cut
                yield self._make(chosen)

    def max_steps(self, split: str = "train", batch_size: int = 1) -> int:
        """The longest piece of ``split`` in predictions (a frame fewer unless ``predict_first``);
        training windows cut to ``max_train_len``; evaluation reads whole pieces."""
        self.check_split(split)
        T = max(len(p) for p in self.pieces[split]) - (0 if self.predict_first else 1)
        return min(T, self.max_train_len) if split == "train" and self.max_train_len else T

    def eval_batches(self, split: str, batch_size: int) -> Iterable[Batch]:
        """Whole pieces, sorted by length (less padding); every frame counts once."""
        self.check_split(split)
        pieces = sorted(self.pieces[split], key=len)
        for i in range(0, len(pieces), batch_size):
            yield self._make(pieces[i : i + batch_size])

    # --- loss and metrics -----------------------------------------------------------------
    def _frames(self, out: torch.Tensor, batch: Batch):
        T = out.shape[1]
        mask = torch.arange(T, device=out.device)[None, :] < batch.lengths.to(out.device)[:, None]
        return out[mask], batch.y.to(out.device)[mask]  # (frames, 88)

    def loss(self, out: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Per-frame NLL (summed over the 88 keys), averaged over the frames of the batch."""
        o, y = self._frames(out, batch)
        return F.binary_cross_entropy_with_logits(o, y, reduction="sum") / o.shape[0]

    def metric_names(self) -> tuple[str, ...]:
        return ("loss", "nll", "key_accuracy")

    def metric_sums(self, out: torch.Tensor, batch: Batch) -> dict[str, tuple[float, float]]:
        o, y = self._frames(out, batch)
        nll = F.binary_cross_entropy_with_logits(o, y, reduction="sum").item()
        frames = float(o.shape[0])
        acc = ((o > 0).float() == y).float().mean(1).sum().item()
        return {"loss": (nll, frames), "nll": (nll, frames), "key_accuracy": (acc, frames)}

    def baseline(self) -> dict[str, float]:
        """The constant 0.5 predictor: 88 ln 2 nats per frame."""
        return {"loss": KEYS * math.log(2.0), "nll": KEYS * math.log(2.0)}

    def describe(self) -> str:
        sizes = ", ".join(f"{s} {len(p)} pieces/{sum(len(x) for x in p)} frames" for s, p in self.pieces.items())
        return f"music[{self.dataset}]: 88 keys, next-frame NLL; {sizes}"
