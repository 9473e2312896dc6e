"""rnnlab.Stepper, the trainer's update for a custom loop: a loop of your own with it ends on
exactly the parameters `rnnlab train` ends on (per-tag learning rates, the cells' regularizer,
clipping, dynamic trivialization's re-bases), and a plain loop without those does not."""

import doctest

import pytest
import torch

import rnnlab
from conftest import tiny_copy
from rnnlab import config
from rnnlab.model import build_model
from rnnlab.train import build_task, load_checkpoint, train

torch.set_num_threads(1)

STEPS = 6
CASES = {
    # nnRNN: the eigenvalue penalty (delta), its "orthogonal" and "nonnormal" groups with their own lr/decay
    "nnrnn": [
        "model.cell_options.delta=0.5",
        "optim.group_lr.orthogonal=3e-3",
        "optim.group_weight_decay.nonnormal=1e-2",
    ],
    # asRNN with dynamic trivialization every 2 steps (after_optimizer_step re-bases), clipped gradients
    "asrnn": ["model.cell_options.K=2", "optim.clip=0.05", "optim.group_lr.orthogonal=2e-3"],
    # DMU: the memory group at lr / (2 n) through group_scales
    "dmu": [],
}


def _cfg(key: str):
    return config.load(
        f"demo/{key}",
        tiny_copy(
            "train.test=false",
            "optim.lr=0.01",
            *CASES[key],
            L=6,
            eval_size=8,
            hidden=8,
            batch=4,
            eval_every=STEPS,
            log_every=None,
            steps=STEPS,
        ),
    )


def _own_loop(cfg, stepper_of):
    torch.manual_seed(cfg.train.seed)  # as the trainer seeds before it builds the model
    task = build_task(cfg.task)
    model = build_model(cfg.model, task)
    step = stepper_of(model)
    stream = task.train_batches(cfg.train.batch_size, torch.Generator().manual_seed(cfg.data_seed))
    model.train()
    for _ in range(cfg.train.steps):
        batch = next(stream)
        out, _ = model(batch.x, None, batch.lengths)
        step(task.loss(out, batch))
    return model


@pytest.mark.parametrize("key", sorted(CASES))
def test_stepper_loop_ends_where_the_trainer_ends(key, tmp_path):
    cfg = _cfg(key)
    train(cfg, tmp_path / "run", progress=False)
    want = load_checkpoint(tmp_path / "run" / "checkpoint.pt", full=True)["model"]

    def with_stepper(model):
        return rnnlab.Stepper(model, cfg.optim).step

    got = _own_loop(cfg, with_stepper).state_dict()
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), k

    # the same loop with one plain optimizer (no groups, no regularizer, no hooks) ends elsewhere
    def plain(model):
        opt = torch.optim.RMSprop(model.parameters(), lr=cfg.optim.lr, alpha=cfg.optim.alpha, eps=cfg.optim.eps)

        def step(loss):
            opt.zero_grad()
            loss.backward()
            opt.step()

        return step

    other = _own_loop(cfg, plain).state_dict()
    assert any(not torch.equal(other[k], want[k]) for k in want)


def test_stepper_on_a_module_of_your_own():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = rnnlab.NNRNN(3, 8, batch_first=True, delta=1.0)
            self.head = torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    torch.manual_seed(0)
    net = Net()
    stepper = rnnlab.Stepper(net, lr=1e-2, group_lr={"orthogonal": 1e-4})
    assert stepper.groups["orthogonal"]["lr"] == 1e-4 and stepper.groups["default"]["lr"] == 1e-2
    tagged = {id(p) for g in stepper.optimizer.param_groups for p in g["params"]}
    assert tagged == {id(p) for p in net.parameters()}  # every parameter in exactly one group
    assert sum(len(g["params"]) for g in stepper.optimizer.param_groups) == len(list(net.parameters()))
    with torch.no_grad():
        net.rnn.cells[0].gamma.fill_(1.5)
    reg = stepper.regularization()
    assert reg.item() == pytest.approx(1.0 * 4 * 0.25)  # delta * sum_k (gamma_k - 1)^2, H/2 = 4 blocks
    info = stepper.step(net(torch.randn(5, 4, 3)).square().mean())
    assert info["reg"] == pytest.approx(1.0) and info["grad_norm"] is None  # clip 0: no clipping


def test_stepper_reads_a_preset_and_refuses_bad_options():
    layer = rnnlab.NNRNN(3, 8)
    s = rnnlab.Stepper(layer, "nnrnn/copy")
    assert s.config.lr == 5e-4 and s.groups["orthogonal"]["lr"] == 1e-6
    assert rnnlab.Stepper(layer, "nnrnn/copy", lr=1e-3).groups["default"]["lr"] == 1e-3
    with pytest.raises(TypeError, match="unknown Stepper option"):
        rnnlab.Stepper(layer, learning_rate=1e-3)
    with pytest.raises(ValueError, match="optim.lr must be a finite number > 0"):
        rnnlab.Stepper(layer, lr=-1.0)


def test_docstring_examples_run():
    import rnnlab.cells.layers
    import rnnlab.stepper
    import rnnlab.tasks.arrays

    for module in (rnnlab.stepper, rnnlab.tasks.arrays, rnnlab.cells.layers):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_an_overflowing_gradient_norm_calls_the_stop_before_the_step():
    """Finite gradients whose norm overflows float32 (clipping would scale the update to zero):
    ``clip_and_step`` hands the norm to ``on_overflow`` before the optimizer steps (the trainer
    raises there); without a stop, or without clipping, the step is taken as before."""
    import math

    def fresh(clip):
        model = torch.nn.Linear(4, 1, bias=False)
        with torch.no_grad():
            model.weight.zero_()
        return model, rnnlab.Stepper(model, name="sgd", lr=0.1, clip=clip)

    def loss(model):
        return (model(torch.full((1, 4), 3e38)) * 1.0).sum()  # each gradient 3e38: finite

    model, st = fresh(1.0)
    seen = []

    def stop(g):
        seen.append(g)
        raise RuntimeError("stopped")

    st.backward(loss(model))
    with pytest.raises(RuntimeError, match="stopped"):
        st.clip_and_step(stop)
    assert seen == [math.inf] and torch.equal(model.weight, torch.zeros(1, 4))  # not stepped
    model, st = fresh(1.0)  # no stop given (Stepper.step): the norm is returned, nothing raised
    st.backward(loss(model))
    assert math.isinf(float(st.clip_and_step()))
    model, st = fresh(0.0)  # no clipping: no norm, no stop
    st.backward(loss(model))
    assert st.clip_and_step(stop) is None and seen == [math.inf]


def test_post_step_hooks_run_only_where_a_model_has_them(monkeypatch):
    """The Stepper reads once whether the model has post-step work (a dynamic-trivialization
    map or a module's ``after_optimizer_step``) and skips the walk over its modules when it has
    none; a hook of a cell of your own still runs after every step."""
    import rnnlab.parametrize as par

    calls = []
    real = par.after_optimizer_step
    monkeypatch.setattr(par, "after_optimizer_step", lambda m: (calls.append(1), real(m)))

    class Hooked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 1)
            self.steps = 0

        def forward(self, x):
            return self.lin(x)

        def after_optimizer_step(self):
            self.steps += 1

    plain, hooked = torch.nn.Linear(3, 1), Hooked()
    for model in (plain, hooked):
        s = rnnlab.Stepper(model, lr=0.01)
        for _ in range(3):
            s.step(model(torch.randn(4, 3)).square().mean())
    assert par.has_post_step_work(hooked) and not par.has_post_step_work(plain)
    assert hooked.steps == 3 and len(calls) == 3  # the plain model's steps walked nothing
