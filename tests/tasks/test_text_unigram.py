"""Text tasks show two memoryless baselines: the uniform predictor and the unigram one (the
training stream's token frequencies), which a constant model scores exactly and which is far
below the uniform one on skewed text; the results table shows both."""

import json
import math

import pytest
import torch

from rnnlab.results import table
from rnnlab.tasks import TASKS

TRAIN = "a a a a b a a c _ a a b a a a _ a a a a b b a a _ a a a d a\n" * 4
VAL = "a a b a a a _ a c a a a d a a b a\n"


@pytest.fixture
def ptb_root(tmp_path):
    d = tmp_path / "ptb"
    d.mkdir()
    for split, text in {"train": TRAIN, "valid": VAL, "test": VAL}.items():
        (d / f"ptb.char.{split}.txt").write_text(text)
    return tmp_path


def test_unigram_baseline_is_what_the_frequency_predictor_scores(ptb_root):
    task = TASKS["ptb_char"](bptt=4, data_dir=ptb_root, verify=False)
    V = task.num_tokens
    counts = torch.bincount(task.streams["train"], minlength=V).double()
    logp = ((counts + 1) / (counts.sum() + V)).log().float()
    sums = {}
    for b in task.eval_batches("val", 3):  # a constant model that outputs the unigram log-probabilities
        for k, (s, n) in task.metric_sums(logp.expand(*b.y.shape, V), b).items():
            acc = sums.setdefault(k, [0.0, 0.0])
            acc[0] += s
            acc[1] += n
    scored = task.finalize({k: s / n for k, (s, n) in sums.items()})
    base = task.baseline()
    assert base["unigram_bpc"] == pytest.approx(scored["bpc"], rel=1e-5)
    assert base["unigram_loss"] == pytest.approx(scored["loss"], rel=1e-5)
    assert base["unigram_accuracy"] == pytest.approx(scored["accuracy"])
    assert base["bpc"] == pytest.approx(math.log2(V))  # the uniform predictor, unchanged
    assert base["unigram_bpc"] < 0.8 * base["bpc"]  # far better on skewed text


def test_unigram_of_words_has_a_perplexity(tmp_path):
    d = tmp_path / "ptb"
    d.mkdir()
    for split in ("train", "valid", "test"):
        (d / f"ptb.{split}.txt").write_text("the cat sat on the mat\nthe dog sat\n" * 3)
    task = TASKS["ptb_word"](data_dir=tmp_path, verify=False)
    base = task.baseline()
    assert base["unigram_perplexity"] == pytest.approx(math.exp(base["unigram_loss"]))
    assert base["unigram_perplexity"] < base["perplexity"] == pytest.approx(task.num_tokens)


def test_table_shows_both_baselines(tmp_path):
    run = tmp_path / "ptb-run" / "seed0"
    run.mkdir(parents=True)
    result = {
        "name": "ptb-run",
        "task": "ptb_char",
        "cell": "lstm",
        "seed": 0,
        "steps": 1,
        "final": {"val/bpc": 3.5},
        "test": {"test/bpc": 3.4},
        "baseline": {"bpc": 5.6439, "loss": 3.912, "unigram_bpc": 4.4, "unigram_loss": 3.05},
    }
    (run / "result.json").write_text(json.dumps(result))
    text = table(tmp_path, ["test/bpc"], timing=False)
    assert "| 5.6439 uniform, 4.4000 unigram |" in text
