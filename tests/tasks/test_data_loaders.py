"""Loaders and tasks on small fixture files built here: IDX gzip, PTB text, .mat, Tatoeba zip.

Metric checks are hand-computable: a uniform predictor scores BPC = log2(V); a constant 0.5
music predictor scores 88 ln 2 nats per frame.
"""

from __future__ import annotations

import gzip
import math
import struct
import zipfile

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import SPANISH_PAIRS
from rnnlab.tasks import TASKS
from rnnlab.tasks.data import ptb_chars_from_words
from rnnlab.tasks.mnist import mnist_permutation, read_idx
from rnnlab.tasks.text import eval_rows, read_ptb_chars, read_ptb_words
from rnnlab.tasks.translation import EOS, SOS, corpus_bleu, tokenize

torch.set_num_threads(1)


# --- MNIST -----------------------------------------------------------------------------------
def write_idx(path, array: np.ndarray):
    code = {np.dtype(np.uint8): 0x08}[array.dtype]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


@pytest.fixture
def mnist_root(tmp_path):
    rng = np.random.RandomState(0)
    d = tmp_path / "mnist"
    d.mkdir()
    train = rng.randint(0, 256, size=(30, 28, 28)).astype(np.uint8)
    test = rng.randint(0, 256, size=(7, 28, 28)).astype(np.uint8)
    # each image's first pixel encodes its index so the tests can trace where it went
    train[:, 0, 0] = np.arange(30)
    test[:, 0, 0] = np.arange(7)
    write_idx(d / "train-images-idx3-ubyte.gz", train)
    write_idx(d / "train-labels-idx1-ubyte.gz", (np.arange(30) % 10).astype(np.uint8))
    write_idx(d / "t10k-images-idx3-ubyte.gz", test)
    write_idx(d / "t10k-labels-idx1-ubyte.gz", (np.arange(7) % 10).astype(np.uint8))
    return tmp_path, train, test


def test_read_idx_roundtrip_and_bad_magic(tmp_path):
    a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "a.gz", a)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.gz"), a)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x05")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "bad")


def test_smnist_splits_scaling_and_batches(mnist_root):
    root, train, test = mnist_root
    task = TASKS["smnist"](val_size=6, data_dir=root, verify=False)
    assert (task.input_size, task.output_size, task.readout) == (1, 10, "last")
    assert len(task.labels["train"]) == 24 and len(task.labels["val"]) == 6 and len(task.labels["test"]) == 7
    # validation = the last 6 training images, never trained on
    val = torch.cat([b.x for b in task.eval_batches("val", 4)])
    assert val.shape == (6, 784, 1)
    torch.testing.assert_close(val[:, :, 0], torch.from_numpy(train[24:].reshape(6, 784)).float() / 255)
    g = torch.Generator().manual_seed(3)
    it = task.train_batches(8, g)
    seen = torch.cat([next(it).x[:, 0, 0] for _ in range(3)])  # one epoch = 3 batches of 8
    assert sorted((seen * 255).round().long().tolist()) == list(range(24))
    assert 0.0 <= float(task.images["train"].min()) and float(next(it).x.max()) <= 1.0


def test_psmnist_permutation_is_numpy_randomstate(mnist_root):
    root, train, _ = mnist_root
    perm = mnist_permutation(92916)
    assert np.array_equal(perm, np.random.RandomState(92916).permutation(784))
    task = TASKS["psmnist"](val_size=6, data_dir=root, verify=False)
    x = next(iter(task.eval_batches("val", 6))).x[:, :, 0]
    expect = torch.from_numpy(train[24:].reshape(6, 784)[:, perm]).float() / 255
    torch.testing.assert_close(x, expect)
    other = TASKS["psmnist"](val_size=6, perm_seed=1, data_dir=root, verify=False)
    assert not torch.equal(other.images["val"], task.images["val"])


def test_mnist_rejects_bad_val_size(mnist_root):
    with pytest.raises(ValueError, match="val_size"):
        TASKS["smnist"](val_size=30, data_dir=mnist_root[0], verify=False)


# --- text ------------------------------------------------------------------------------------
WORDS = {
    "train": " the cat sat on the mat \n a dog <unk> N \n the end \n",
    "valid": " the dog sat \n a cat \n",
    "test": " the mat \n",
}


@pytest.fixture
def ptb_root(tmp_path):
    d = tmp_path / "ptb"
    d.mkdir()
    for split, text in WORDS.items():
        (d / f"ptb.{split}.txt").write_text(text)
        (d / f"ptb.char.{split}.txt").write_text(ptb_chars_from_words(text))
    return tmp_path


def test_ptb_readers(ptb_root):
    assert read_ptb_words(ptb_root / "ptb" / "ptb.valid.txt") == ["the", "dog", "sat", "<eos>", "a", "cat", "<eos>"]
    chars = read_ptb_chars(ptb_root / "ptb" / "ptb.char.test.txt")
    assert chars == list("the_mat") + ["\n"]


def test_ptb_word_vocab_and_full_eval_stream(ptb_root):
    task = TASKS["ptb_word"](bptt=3, data_dir=ptb_root, verify=False)
    train_words = set(WORDS["train"].split()) | {"<eos>"}
    assert set(task.vocab.itos) == train_words and task.num_tokens == len(train_words)
    stream = task.streams["val"]
    # every next-token target appears exactly once, in order, across the masked eval batches
    for B in (1, 2, 4):
        ys, xs = [], []
        batches = list(task.eval_batches("val", B))
        assert [b.carry_state for b in batches] == [False] + [True] * (len(batches) - 1)
        rows_y = torch.cat([b.y for b in batches], 1)
        rows_x = torch.cat([b.x for b in batches], 1)
        masks = torch.cat(
            [b.mask if b.mask is not None else torch.ones_like(b.y, dtype=torch.bool) for b in batches], 1
        )
        ys = rows_y[masks]
        xs = rows_x[masks]
        assert torch.equal(ys, stream[1:]) and torch.equal(xs, stream[:-1])


def test_eval_rows_shapes():
    x, y, m = eval_rows(torch.arange(11), 4)  # 10 predictions in rows of 3
    assert x.shape == (4, 3) and int(m.sum()) == 10
    x, y, m = eval_rows(torch.arange(6), 4)  # 5 predictions: rows of 2, 3 rows (no empty row)
    assert x.shape == (3, 2) and int(m.sum()) == 5


def test_ptb_char_train_chunks_carry_state(ptb_root):
    task = TASKS["ptb_char"](bptt=4, data_dir=ptb_root, verify=False)
    assert "\n" in task.vocab.stoi and "_" in task.vocab.stoi and task.primary_metric == "bpc"
    rows = task.streams["train"].numel() // 2
    it = task.train_batches(2, torch.Generator())
    n_chunks = math.ceil((rows - 1) / 4)
    batches = [next(it) for _ in range(n_chunks + 1)]
    assert [b.carry_state for b in batches] == [False] + [True] * (n_chunks - 1) + [False]
    # concatenated chunks rebuild each row; targets are inputs shifted by one
    xs = torch.cat([b.x for b in batches[:n_chunks]], 1)
    ys = torch.cat([b.y for b in batches[:n_chunks]], 1)
    full = task.streams["train"][: 2 * rows].view(2, rows)
    assert torch.equal(xs, full[:, :-1]) and torch.equal(ys, full[:, 1:])


def test_uniform_predictor_scores_log2_vocab(ptb_root):
    task = TASKS["ptb_char"](bptt=5, data_dir=ptb_root, verify=False)
    V = task.num_tokens
    sums = {}
    for b in task.eval_batches("val", 3):
        for k, (s, n) in task.metric_sums(torch.zeros(*b.y.shape, V), b).items():
            a = sums.setdefault(k, [0.0, 0.0])
            a[0] += s
            a[1] += n
    means = {k: s / n for k, (s, n) in sums.items()}
    out = task.finalize(means)
    assert out["bpc"] == pytest.approx(math.log2(V), rel=1e-6)
    assert sums["loss"][1] == task.streams["val"].numel() - 1  # every target counted once
    assert task.baseline()["bpc"] == pytest.approx(math.log2(V))
    word = TASKS["ptb_word"](data_dir=ptb_root, verify=False)
    assert word.finalize({"loss": math.log(word.num_tokens)})["perplexity"] == pytest.approx(word.num_tokens)


def test_carried_state_over_chunks_equals_one_pass(ptb_root):
    """TBPTT evaluation with the state carried across chunks = running each row in one go."""
    torch.manual_seed(0)
    task = TASKS["ptb_char"](bptt=3, data_dir=ptb_root, verify=False)
    V = task.num_tokens
    rnn, lin = torch.nn.RNN(V, 8, batch_first=True), torch.nn.Linear(8, V)
    total, count, h = 0.0, 0, None
    for b in task.eval_batches("test", 2):
        if not b.carry_state:
            h = None
        out, h = rnn(F.one_hot(b.x, V).float(), h)
        s, n = task.metric_sums(lin(out), b)["loss"]
        total, count = total + s, count + n
    x, y, m = eval_rows(task.streams["test"], 2)
    out, _ = rnn(F.one_hot(x, V).float())
    ref = F.cross_entropy(lin(out)[m], y[m], reduction="sum").item()
    assert count == int(m.sum()) and total == pytest.approx(ref, rel=1e-5)


def test_shakespeare_split(tmp_path):
    d = tmp_path / "tinyshakespeare"
    d.mkdir()
    text = "".join(chr(97 + (i * 7) % 26) for i in range(400)) + "\n"
    (d / "input.txt").write_text(text)
    task = TASKS["text_char"](corpus="shakespeare", bptt=10, data_dir=tmp_path, verify=False)
    assert task.num_tokens == 27
    n = {s: v.numel() for s, v in task.streams.items()}
    assert n == {"train": int(0.9 * 401), "val": int(0.95 * 401) - int(0.9 * 401), "test": 401 - int(0.95 * 401)}
    assert "".join(task.vocab.decode(task.streams["train"])) == text[: n["train"]]


# --- music -----------------------------------------------------------------------------------
@pytest.fixture
def music_root(tmp_path):
    sio = pytest.importorskip("scipy.io")
    rng = np.random.RandomState(1)
    d = tmp_path / "polyphonic"
    d.mkdir()

    def cells(lengths):
        c = np.empty((1, len(lengths)), dtype=object)
        for i, T in enumerate(lengths):
            c[0, i] = (rng.rand(T, 88) < 0.1).astype(np.uint8)
        return c

    mat = {"traindata": cells([5, 9, 3, 7]), "validdata": cells([4, 11]), "testdata": cells([6])}
    sio.savemat(d / "JSB_Chorales.mat", mat)
    return tmp_path, mat


def test_music_loader_and_shift(music_root):
    root, mat = music_root
    task = TASKS["music"](dataset="jsb", data_dir=root, verify=False)
    assert [len(p) for p in task.pieces["val"]] == [4, 11]
    b = next(iter(task.eval_batches("val", 8)))
    assert b.lengths.tolist() == [4, 11] and b.x.shape == (2, 11, 88)
    v = torch.from_numpy(mat["validdata"][0, 1].astype(np.float32))
    torch.testing.assert_close(b.y[1], v)
    assert torch.equal(b.x[1, 0], torch.zeros(88)) and torch.equal(b.x[1, 1:], v[:-1])
    t2 = TASKS["music"](dataset="jsb", predict_first=False, data_dir=root, verify=False)
    b2 = next(iter(t2.eval_batches("val", 8)))
    assert b2.lengths.tolist() == [3, 10] and torch.equal(b2.y[1, :10], v[1:])


def test_music_constant_half_is_88_ln2_per_frame(music_root):
    root, _ = music_root
    task = TASKS["music"](dataset="jsb", data_dir=root, verify=False)
    for split in ("train", "val", "test"):
        s = n = 0.0
        for b in task.eval_batches(split, 3):
            ls, ln = task.metric_sums(torch.zeros_like(b.y), b)["nll"]
            s, n = s + ls, n + ln
        assert n == sum(len(p) for p in task.pieces[split])
        assert s / n == pytest.approx(88 * math.log(2), rel=1e-6)
    b = next(task.train_batches(2, torch.Generator()))
    assert task.loss(torch.zeros_like(b.y), b).item() == pytest.approx(88 * math.log(2), rel=1e-6)


def test_music_nll_is_pooled_over_frames(music_root):
    """Frame NLL = (sum over all frames and keys) / frames, checked against a direct formula
    with a predictor that differs per piece (so the pooled and per-piece means differ)."""
    root, _ = music_root
    task = TASKS["music"](dataset="jsb", data_dir=root, verify=False)
    ps = [0.2, 0.7]
    total = frames = 0.0
    for p, piece in zip(ps, task.pieces["val"]):
        v = piece.double()
        total += -(v * math.log(p) + (1 - v) * math.log(1 - p)).sum().item()
        frames += len(piece)
    b = next(iter(task.eval_batches("val", 2)))
    logits = torch.stack([torch.full(b.y.shape[1:], math.log(p / (1 - p))) for p in ps])
    s, n = task.metric_sums(logits, b)["nll"]
    assert n == frames and s / n == pytest.approx(total / frames, rel=1e-5)


def test_music_train_windows(music_root):
    root, _ = music_root
    task = TASKS["music"](dataset="jsb", max_train_len=4, data_dir=root, verify=False)
    it = task.train_batches(2, torch.Generator().manual_seed(0))
    for _ in range(4):
        b = next(it)
        assert int(b.lengths.max()) <= 4 and b.x.shape[0] == 2


def test_music_max_steps_bound_every_batch_of_each_split(music_root):
    """Batches are padded to their longest piece: the bound is the split's longest piece (in
    predictions), training windows cut to max_train_len, evaluation whole pieces."""
    root, _ = music_root
    for kw, want in (({}, (9, 11, 6)), ({"predict_first": False}, (8, 10, 5)), ({"max_train_len": 4}, (4, 11, 6))):
        task = TASKS["music"](dataset="jsb", data_dir=root, verify=False, **kw)
        assert tuple(task.max_steps(s, 2) for s in ("train", "val", "test")) == want, kw
        it = task.train_batches(2, torch.Generator().manual_seed(0))
        seen = max(next(it).x.shape[1] for _ in range(8))
        assert seen == want[0]  # reached, never passed
        for s, bound in zip(("val", "test"), want[1:]):
            assert max(b.x.shape[1] for b in task.eval_batches(s, 2)) == bound


def test_music_unknown_name():
    with pytest.raises(ValueError, match="unknown music dataset"):
        TASKS["music"](dataset="bach")


# --- translation -----------------------------------------------------------------------------
def test_tokenize():
    assert tokenize("¿Dónde está Tom?") == ["¿", "dónde", "está", "tom", "?"]
    assert tokenize("I don't know, Tom.") == ["i", "don't", "know", ",", "tom", "."]


def test_bleu_hand_cases():
    ref = "the cat is on the mat".split()
    assert corpus_bleu([ref], [ref]) == pytest.approx(1.0)
    # Papineni's clipped precision: 7 x "the" against a reference with two "the" -> 2/7
    assert corpus_bleu([["the"] * 7], [ref], max_n=1) == pytest.approx(2 / 7)
    # brevity penalty: c = 2, r = 6 -> exp(1 - 3), both precisions are 1
    assert corpus_bleu([["the", "cat"]], [ref], max_n=2) == pytest.approx(math.exp(-2))
    # corpus level: counts are pooled before dividing (not a mean of sentence scores)
    c = [["a", "b"], ["c", "x", "y", "z"]]
    r = [["a", "b"], ["c", "d", "e", "f"]]
    assert corpus_bleu(c, r, max_n=1) == pytest.approx(3 / 6)
    assert corpus_bleu(c, r, max_n=2) == pytest.approx(math.sqrt(3 / 6 * 1 / 4))
    assert corpus_bleu([["x"]], [ref]) == 0.0


def _reference_bleu(candidates, references, max_n=4):
    """Papineni et al.'s corpus BLEU written out (clipped n-gram counts pooled over the corpus,
    brevity penalty, geometric mean, no smoothing): the second computation of what sacrebleu gives."""
    from collections import Counter

    match, total, c_len, r_len = [0] * max_n, [0] * max_n, 0, 0
    for cand, ref in zip(candidates, references):
        c_len, r_len = c_len + len(cand), r_len + len(ref)
        for n in range(1, max_n + 1):
            cc = Counter(tuple(cand[i : i + n]) for i in range(len(cand) - n + 1))
            rc = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
            match[n - 1] += sum(min(k, rc[g]) for g, k in cc.items())
            total[n - 1] += max(len(cand) - n + 1, 0)
    if c_len == 0 or min(total) == 0 or min(match) == 0:
        return 0.0
    log_p = sum(math.log(m / t) for m, t in zip(match, total)) / max_n
    return (1.0 if c_len >= r_len else math.exp(1.0 - r_len / c_len)) * math.exp(log_p)


def test_bleu_equals_the_written_out_definition_on_random_corpora():
    import random

    rng = random.Random(0)
    words = "a b c d e f".split()
    nonzero = 0
    for _ in range(200):
        n = rng.randint(1, 6)
        refs = [[rng.choice(words) for _ in range(rng.randint(1, 12))] for _ in range(n)]
        cands = [
            [t if rng.random() < 0.8 else rng.choice(words) for t in r[: rng.randint(1, len(r) + 2)]] for r in refs
        ]
        want = _reference_bleu(cands, refs)
        nonzero += want > 0
        assert corpus_bleu(cands, refs) == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert nonzero > 100  # the comparison is not all zeros


def test_without_sacrebleu_bleu_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sacrebleu", None)
    monkeypatch.setitem(sys.modules, "sacrebleu.metrics", None)
    with pytest.raises(ImportError, match=r"rnnlab\[translation\]"):
        corpus_bleu([["a"]], [["a"]])


PAIRS = [
    *SPANISH_PAIRS,
    ("I ran.", "Corrí."),
    ("Go away.", "Vete."),
    ("Tom is here.", "Tom está aquí."),
    ("I am here.", "Estoy aquí."),
] * 3


@pytest.fixture
def tatoeba_root(tmp_path):
    d = tmp_path / "tatoeba"
    d.mkdir()
    with zipfile.ZipFile(d / "spa-eng.zip", "w") as z:
        z.writestr("_about.txt", "about")
        z.writestr("spa.txt", "".join(f"{e}\t{s}\tCC-BY attribution\n" for e, s in PAIRS))
    return tmp_path


def test_translation_split_vocab_and_batches(tatoeba_root):
    t = TASKS["translation"](pair="spa-eng", val_size=5, test_size=6, min_freq=2, data_dir=tatoeba_root, verify=False)
    assert t.model_kind == "seq2seq"
    assert {s: len(v) for s, v in t.data.items()} == {"test": 6, "val": 5, "train": len(PAIRS) - 11}
    again = TASKS["translation"](
        pair="spa-eng", val_size=5, test_size=6, min_freq=2, data_dir=tatoeba_root, verify=False
    )
    assert again.raw == t.raw  # deterministic
    assert t.src_vocab.itos[:4] == ["<pad>", "<sos>", "<eos>", "<unk>"] and "tom" in t.src_vocab.stoi
    # min_freq: a token seen once in training maps to <unk>
    seen = {}
    for src, _ in t.raw["train"]:
        for tok in src:
            seen[tok] = seen.get(tok, 0) + 1
    assert all((tok in t.src_vocab.stoi) == (c >= 2) for tok, c in seen.items())
    b = next(iter(t.eval_batches("test", 4)))
    tgt_in, y, m = b.extra["tgt_in"], b.y, b.mask
    assert torch.equal(tgt_in[:, 0], torch.full((4,), SOS))
    assert torch.equal(tgt_in[:, 1:][m[:, 1:]], y[:, :-1][m[:, 1:]])  # decoder input = targets shifted
    last = m.sum(1) - 1
    assert torch.equal(y[torch.arange(4), last], torch.full((4,), EOS))
    assert "teacher_mask" not in b.extra


def test_teacher_forcing_ratio_meaning(tatoeba_root):
    kw = dict(val_size=5, test_size=6, data_dir=tatoeba_root, verify=False)
    assert (
        "teacher_mask"
        not in next(TASKS["translation"](teacher_forcing=1.0, **kw).train_batches(8, torch.Generator())).extra
    )
    t = TASKS["translation"](teacher_forcing=0.25, **kw)
    it = t.train_batches(16, torch.Generator().manual_seed(0))
    frac = torch.cat([next(it).extra["teacher_mask"].flatten() for _ in range(50)]).float().mean()
    assert abs(float(frac) - 0.25) < 0.03  # True = feed the ground truth, with probability r
    with pytest.raises(ValueError, match="teacher_forcing"):
        TASKS["translation"](teacher_forcing=1.5, **kw)


def test_translation_ppl_uniform_and_oracle_bleu(tatoeba_root):
    t = TASKS["translation"](val_size=5, test_size=6, min_freq=1, data_dir=tatoeba_root, verify=False)
    V = t.output_size
    s = n = 0.0
    for b in t.eval_batches("test", 4):
        ls, ln = t.metric_sums(torch.zeros(*b.y.shape, V), b)["loss"]
        s, n = s + ls, n + ln
    assert n == sum(len(g) + 1 for _, g in t.data["test"])  # every target token and <eos>
    assert t.finalize({"loss": s / n})["perplexity"] == pytest.approx(V, rel=1e-6)

    class Oracle(torch.nn.Module):
        """Returns the reference ids of the split in order (an exact translator)."""

        def __init__(self, refs):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.refs, self.i = refs, 0

        def generate(self, x, lengths, max_len):
            rows = self.refs[self.i : self.i + x.shape[0]]
            self.i += x.shape[0]
            out = torch.zeros(len(rows), max_len, dtype=torch.long)
            for r, ids in enumerate(rows):
                out[r, : len(ids) + 1] = torch.tensor(ids + [EOS])
            return out

    refs = [g for _, g in t.data["test"]]
    assert not any(3 in g for g in refs)  # no <unk> (it could never match a reference word)
    assert t.model_metrics(Oracle(refs), "test", batch_size=4)["bleu"] == pytest.approx(100.0)
    hyp = Oracle([[4] for _ in refs])
    assert t.model_metrics(hyp, "test", batch_size=4)["bleu"] < 1.0


def test_psmnist_nnrnn_split_and_fixed_order(mnist_root):
    """split="nnrnn": the nnRNN script's split (RandomState(perm_seed) draws the pixel order,
    then the permutation R of the training images: train R[:N - val], validation the rest);
    shuffle=False: every epoch in that order."""
    root, train, _ = mnist_root
    task = TASKS["psmnist"](val_size=6, perm_seed=1234, data_dir=root, verify=False, split="nnrnn", shuffle=False)
    rng = np.random.RandomState(1234)
    perm = rng.permutation(784)
    R = rng.permutation(30)
    flat = train.reshape(30, 784)[:, perm]
    torch.testing.assert_close(task.images["train"], torch.from_numpy(flat[R[:24]]))
    torch.testing.assert_close(task.images["val"], torch.from_numpy(flat[R[24:]]))
    it = task.train_batches(8, torch.Generator().manual_seed(0))
    epoch = [next(it).x for _ in range(3)]
    again = [next(it).x for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(epoch, again))  # the same order every epoch
    torch.testing.assert_close(torch.cat(epoch)[:, :, 0] * 255, torch.from_numpy(flat[R[:24]]).float())
    default = TASKS["psmnist"](val_size=6, perm_seed=1234, data_dir=root, verify=False)
    assert not torch.equal(default.images["val"], task.images["val"])
    with pytest.raises(ValueError, match="split must be"):
        TASKS["psmnist"](val_size=6, data_dir=root, verify=False, split="random")
