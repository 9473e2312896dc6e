"""The one training loop (rnnlab.train.Group): a single run is a group of one.

Its update step is checked against the public one-call step a user's own loop takes
(rnnlab.Stepper.step on the model's loss over the same data stream), and a group of one
against the ensemble of the same seed."""

import torch

from rnnlab import config
from rnnlab import train as T
from rnnlab.ensemble import Ensemble, started
from rnnlab.evaluation import model_forward
from rnnlab.model import build_model
from rnnlab.stepper import Stepper
from rnnlab.tasks import build_task

OVER = ["task.L=20", "task.val_size=16", "task.test_size=16", "train.batch_size=8", "optim.clip=1.0"]


def _weights(model) -> list:
    return [p.detach().clone() for p in model.parameters()]


def test_a_group_of_one_steps_as_the_stepper_does(tmp_path):
    """Ten Group.step calls of a group of one leave the weights a hand-written loop of
    Stepper.step leaves (the same model seed, data stream, clipping and optimizer): bit for bit."""
    cfg = config.load("dmu/adding-dmu", OVER)
    task = build_task(cfg.task)
    with started(cfg, [0], tmp_path, task, batched=False) as group:
        assert type(group) is T.Group and group.size == 1
        for _ in range(10):
            group.step(group.members)
        got = _weights(group.members[0].tr.model)
        assert group.members[0].run.prog.step == 10
    torch.manual_seed(0)
    model = build_model(cfg.model, task)
    stepper = Stepper(model, cfg.optim)
    stream = task.train_batches(cfg.train.batch_size, torch.Generator().manual_seed(cfg.data_seed))
    for _ in range(10):
        batch = next(stream)
        out, _ = model_forward(model, batch, None)
        stepper.step(task.loss(out, batch))
    assert all(torch.equal(a, b) for a, b in zip(got, _weights(model)))


def test_an_ensemble_is_a_group_and_its_member_follows_the_group_of_one(tmp_path):
    """The same seed trained by a group of one and as a member of a two-member ensemble: the
    same loop (Ensemble is a Group), the same steps, weights equal to float32 rounding."""
    cfg = config.load("dmu/adding-dmu", OVER)
    task = build_task(cfg.task)
    with started(cfg, [1], tmp_path / "one", task, batched=False) as one:
        for _ in range(5):
            one.step(one.members)
        alone = _weights(one.members[0].tr.model)
    with started(cfg, [0, 1], tmp_path / "two", task) as two:
        assert isinstance(two, Ensemble) and isinstance(two, T.Group)
        for _ in range(5):
            two.step(two.members)
        member = _weights(two.members[1].tr.model)
    for a, b in zip(alone, member):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_an_unbatched_group_takes_one_seed(tmp_path):
    import pytest

    from rnnlab.config import ConfigError

    cfg = config.load("dmu/adding-dmu", OVER)
    with pytest.raises(ConfigError, match="give one seed"):
        with started(cfg, [0, 1], tmp_path, batched=False):
            pass
