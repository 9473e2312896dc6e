"""Checks against the real dataset files, when a copy is available.

The folder is ``$RNNLAB_TEST_DATA`` (the ``data_root`` fixture of conftest.py); the tests skip
with a reason when it is absent. Loads that take more than a couple of seconds are marked slow.
"""

from __future__ import annotations

import math

import pytest
import torch

from rnnlab.tasks import TASKS, data

torch.set_num_threads(1)

needs_data = pytest.mark.needs_data


def _present(dataset: str, root) -> bool:
    return all(
        data.file_status(dataset, f.name, root, check_hash=False).state != "missing"
        for f in data.get_dataset(dataset).files
        if not f.optional
    )


@needs_data
@pytest.mark.parametrize("name", ["polyphonic", "tinyshakespeare", "tatoeba"])
def test_small_datasets_verify(name, data_root):
    if not _present(name, data_root):
        pytest.skip(f"{name} files not in {data_root}")
    for st in data.verify(name, data_root):
        f = data.get_dataset(name).file(st.file)
        assert st.state == "ok" or (f.optional and st.state == "missing"), st


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("name", ["mnist", "ptb"])
def test_large_datasets_verify(name, data_root):
    assert all(st.state == "ok" for st in data.verify(name, data_root))


@needs_data
def test_ptb_char_files_follow_from_word_files(data_root):
    import hashlib

    text = (data_root / "ptb" / "ptb.valid.txt").read_text()
    built = data.ptb_chars_from_words(text).encode()
    assert hashlib.sha256(built).hexdigest() == data.get_dataset("ptb").file("ptb.char.valid.txt").sha256


@needs_data
@pytest.mark.parametrize(
    "name,counts",
    [
        ("jsb", {"train": (229, 13807), "val": (76, 4602), "test": (77, 4725)}),
        ("nottingham", {"train": (694, 176561), "val": (173, 45513), "test": (170, 44463)}),
        ("piano", {"train": (87, 75911), "val": (12, 8540), "test": (25, 19036)}),
    ],
)
def test_music_split_sizes_and_half_baseline(name, counts, data_root):
    pytest.importorskip("scipy")
    task = TASKS["music"](dataset=name, data_dir=data_root)
    assert {s: (len(p), sum(len(x) for x in p)) for s, p in task.pieces.items()} == counts
    s = n = 0.0
    for b in task.eval_batches("test", 64):
        ls, ln = task.metric_sums(torch.zeros_like(b.y), b)["nll"]
        s, n = s + ls, n + ln
    assert n == counts["test"][1] and s / n == pytest.approx(88 * math.log(2), rel=1e-6)


@needs_data
def test_shakespeare_has_65_symbols(data_root):
    task = TASKS["text_char"](corpus="shakespeare", data_dir=data_root)
    assert task.num_tokens == 65 and sum(v.numel() for v in task.streams.values()) == 1115394


@needs_data
@pytest.mark.slow
def test_mnist_real_sizes_and_permutation(data_root):
    task = TASKS["psmnist"](data_dir=data_root)
    assert {k: len(v) for k, v in task.labels.items()} == {"train": 55000, "val": 5000, "test": 10000}
    assert torch.bincount(task.labels["test"]).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    b = next(iter(task.eval_batches("test", 2)))
    assert b.x.shape == (2, 784, 1) and 0.0 <= float(b.x.min()) and float(b.x.max()) <= 1.0


@needs_data
@pytest.mark.slow
def test_ptb_vocabularies_and_stream_sizes(data_root):
    char = TASKS["ptb_char"](data_dir=data_root)
    assert char.num_tokens == 50 and "\n" in char.vocab.stoi
    assert char.baseline()["bpc"] == pytest.approx(math.log2(50))
    word = TASKS["ptb_word"](data_dir=data_root)
    assert word.num_tokens == 10000 and {"<eos>", "<unk>"} <= set(word.vocab.itos)
    assert {k: v.numel() for k, v in word.streams.items()} == {"train": 929589, "val": 73760, "test": 82430}


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("pair,lines", [("spa-eng", 118121), ("deu-eng", 169813)])
def test_tatoeba_pairs(pair, lines, data_root):
    from rnnlab.tasks.translation import read_pairs

    assert len(read_pairs(data_root / "tatoeba" / f"{pair}.zip")) == lines
    t = TASKS["translation"](pair=pair, data_dir=data_root)
    assert len(t.data["val"]) == len(t.data["test"]) == 2000
    train_src = {tuple(s) for s, _ in t.raw["train"]}
    assert len(train_src) > 0.5 * len(t.raw["train"])
