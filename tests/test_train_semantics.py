"""What the trainer promises, checked against a second computation: resume equals the
uninterrupted run with the global RNG in use (dropout), clipping bounds the update actually
applied, and best.pt keeps the best evaluation when a later one is worse."""

import json
import math

import pytest
import torch

from conftest import tiny_copy
from rnnlab import config
from rnnlab.model import build_model
from rnnlab.tasks import CopyTask
from rnnlab.train import build_task, model_forward, train


def cfg_(*extra, steps=20):
    return config.load("demo/lstm", tiny_copy(*extra, steps=steps))


def rows(run):
    return [
        {k: v for k, v in json.loads(x).items() if k != "time"}
        for x in (run / "metrics.jsonl").read_text().splitlines()
    ]


def test_resume_with_dropout_equals_the_uninterrupted_run_bit_for_bit(tmp_path):
    """Dropout draws from the global RNG every step: a resume that did not restore the RNG
    state would train on other masks."""
    drop = "model.dropout=0.3"
    full = train(cfg_(drop, steps=10), tmp_path / "full", progress=False)
    train(cfg_(drop, steps=5), tmp_path / "part", progress=False)
    resumed = train(cfg_(drop, steps=10), tmp_path / "part", resume=True, progress=False)
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "part" / "checkpoint.pt", weights_only=False)
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert torch.equal(a["rng"], b["rng"])
    assert resumed["final"] == full["final"] and resumed["test"] == full["test"]
    assert rows(tmp_path / "full") == rows(tmp_path / "part")
    # dropout is really on: the same run without it ends elsewhere
    plain = train(cfg_(steps=10), tmp_path / "plain", progress=False)
    assert plain["final"] != full["final"]


def test_clipping_bounds_the_update_actually_applied(tmp_path):
    """SGD with lr = 1 and clip c: one step moves the weights by exactly the gradient scaled
    to global norm c (computed here independently, in float64)."""
    clip = 0.05
    cfg = cfg_('optim.name="sgd"', "optim.lr=1.0", f"optim.clip={clip}", "train.eval_every=1", steps=1)
    train(cfg, tmp_path / "r", progress=False)
    after = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)["model"]

    task = build_task(cfg.task)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, task)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    batch = next(task.train_batches(cfg.train.batch_size, torch.Generator().manual_seed(cfg.data_seed)))
    model.train()
    out, _ = model_forward(model, batch)
    task.loss(out, batch).backward()
    grads = {n: p.grad.double() for n, p in model.named_parameters()}
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    assert norm > 5 * clip  # the clip is active
    step_norm = 0.0
    for n, g in grads.items():
        moved = before[n].double() - after[n].double()
        torch.testing.assert_close(moved, g * (clip / norm), rtol=1e-4, atol=1e-7)
        step_norm += float((moved * moved).sum())
    assert math.isclose(math.sqrt(step_norm), clip, rel_tol=1e-4)
    logged = next(r for r in rows(tmp_path / "r") if "train/grad_norm" in r)["train/grad_norm"]
    assert math.isclose(logged, norm, rel_tol=1e-4)  # the log reports the norm before clipping


class ScriptedValidation(CopyTask):
    """A copy task whose validation loss follows a script, one value per evaluation."""

    def __init__(self, script, **kw):
        super().__init__(**kw)
        self.script, self.evals, self.split = list(script), 0, None

    def eval_batches(self, split, batch_size):
        self.split = split
        if split == "val":
            self.evals += 1
        return super().eval_batches(split, batch_size)

    def metric_sums(self, out, batch):
        sums = super().metric_sums(out, batch)
        if self.split == "val":
            n = sums["loss"][1]
            sums["loss"] = (self.script[self.evals - 1] * n, n)
        return sums


def test_best_pt_keeps_the_best_evaluation_when_later_ones_are_worse(tmp_path):
    kw = dict(K=3, L=8, val_size=64, test_size=64)
    script = [3.0, 1.0, 2.0, 5.0]  # evaluations at steps 5, 10, 15, 20
    r = train(cfg_(steps=20), tmp_path / "r", progress=False, task=ScriptedValidation(script, **kw))
    assert r["best"] == {"step": 10, "val/loss": 1.0}
    assert r["final"]["val/loss"] == 5.0
    # training time alone per step: evaluation and checkpoint writing are timed apart
    assert r["train_time_s"] + r["eval_time_s"] == pytest.approx(r["wall_time_s"], abs=0.02)
    assert r["time_per_step_s"] == round(r["train_time_s"] / r["steps"], 4)
    # the weights of step 10, from a run stopped there
    train(cfg_(steps=10), tmp_path / "at10", progress=False, task=ScriptedValidation(script, **kw))
    at10 = torch.load(tmp_path / "at10" / "checkpoint.pt", weights_only=False)["model"]
    best = torch.load(tmp_path / "r" / "best.pt", weights_only=False)
    last = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)["model"]
    assert all(torch.equal(best[k], at10[k]) for k in at10)
    assert not all(torch.equal(best[k], last[k]) for k in last)


def test_the_logged_regularizer_is_the_one_of_the_weights_it_was_computed_from(tmp_path):
    """nnRNN's delta * sum (gamma - 1)^2 is added to the loss and logged as train/reg: the value
    logged at step 3 is the penalty of the weights after step 2 (from a run stopped there)."""
    delta = 0.5
    extra = ['model.cell="nnrnn"', f"model.cell_options.delta={delta}", "train.log_every=1", "train.eval_every=1"]
    train(cfg_(*extra, steps=2), tmp_path / "two", progress=False)
    train(cfg_(*extra, steps=3), tmp_path / "three", progress=False)
    w = torch.load(tmp_path / "two" / "checkpoint.pt", weights_only=False)["model"]
    gammas = [v for k, v in w.items() if k.endswith("gamma")]
    assert gammas
    expected = delta * sum(float((g.double() - 1).pow(2).sum()) for g in gammas)
    logged = next(r for r in rows(tmp_path / "three") if r["step"] == 3 and "train/reg" in r)["train/reg"]
    assert expected > 0 and math.isclose(logged, expected, rel_tol=1e-5)


def test_a_fresh_run_starts_a_fresh_metrics_log(tmp_path):
    """A directory left by a start that died before its first checkpoint may hold a
    metrics.jsonl; the new run must not append to those rows."""
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 999, "train/loss": 1.0}) + "\n")
    train(cfg_(steps=5), run, progress=False)
    steps = [r["step"] for r in rows(run)]
    assert 999 not in steps and steps[0] == 5
