"""The stacked optimizer step of an ensemble (rnnlab.stacked_optim) against each member's own
torch optimizer stepping alone, in float64: Adam, RMSprop and SGD, per-group and per-member
learning rates, weight decay, clipping by each member's own norm; and the state it leaves is
torch's (a member's optimizer continues alone from it)."""

import copy

import pytest
import torch

from rnnlab.stacked_optim import StackedStep

D = torch.float64


def _members(K, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(K):
        ps = [
            torch.nn.Parameter(torch.randn(3, 4, generator=gen, dtype=D)),
            torch.nn.Parameter(torch.randn(5, generator=gen, dtype=D)),
        ]
        ps.append(torch.nn.Parameter(torch.randn(4, 3, generator=gen, dtype=D).t()))  # not contiguous
        out.append(ps)
    return out


def _opt(kind, ps, lr):
    groups = [{"params": ps[:2], "lr": lr, "weight_decay": 0.01}, {"params": ps[2:], "lr": lr / 4}]
    if kind == "adam":
        return torch.optim.Adam(groups, lr=lr, betas=(0.8, 0.95), eps=1e-6)
    if kind == "rmsprop":
        return torch.optim.RMSprop(groups, lr=lr, alpha=0.9, eps=1e-6)
    return torch.optim.SGD(groups, lr=lr)


@pytest.mark.parametrize("kind", ["adam", "rmsprop", "sgd"])
# one threshold for all, or each member its own (a grid over optim.clip: 0 is no clipping)
@pytest.mark.parametrize("clip", [0.0, 0.5, (0.0, 0.5, 0.05, 0.5)])
def test_stacked_step_equals_each_optimizer_alone(kind, clip):
    K = 4
    clips = list(clip) if isinstance(clip, tuple) else [clip] * K
    stacked, alone = _members(K), _members(K)
    lrs = [0.01, 0.02, 0.01, 0.005]  # per member (a schedule moved some)
    opts_s = [_opt(kind, ps, lr) for ps, lr in zip(stacked, lrs)]
    opts_a = [_opt(kind, ps, lr) for ps, lr in zip(alone, lrs)]
    step = StackedStep.build(opts_s)
    assert step is not None
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        for ps_s, ps_a in zip(stacked, alone):
            for p, q in zip(ps_s, ps_a):
                g = torch.randn(p.shape, generator=gen, dtype=D)
                p.grad, q.grad = g.clone(), g.clone()
        norms = step.step(opts_s, stacked, list(clip) if isinstance(clip, tuple) else clip)
        for k, (o, ps) in enumerate(zip(opts_a, alone)):
            n = torch.nn.utils.clip_grad_norm_(ps, clips[k]) if clips[k] > 0 else None
            o.step()
            if clips[k] > 0:
                torch.testing.assert_close(norms[k], n, rtol=1e-12, atol=0)
            else:
                assert norms[k] is None
    for ps_s, ps_a, o_s, o_a in zip(stacked, alone, opts_s, opts_a):
        for p, q in zip(ps_s, ps_a):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
        # the state is torch's: the same keys, values and step counts, so a member continues alone
        s, a = o_s.state_dict()["state"], o_a.state_dict()["state"]
        assert s.keys() == a.keys()
        for i in s:
            assert s[i].keys() == a[i].keys()
            for key in s[i]:
                torch.testing.assert_close(s[i][key], a[i][key], rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["adam", "rmsprop"])
def test_tensors_replaced_between_steps_are_the_ones_stepped(kind):
    """The stacked step keeps flat views of the members' parameters and states between steps;
    a resume's load (new state tensors) and a ``p.data =`` (new parameter memory) between two
    steps must be followed, not written past."""
    K = 3
    stacked, alone = _members(K), _members(K)
    opts_s = [_opt(kind, ps, 0.01) for ps in stacked]
    opts_a = [_opt(kind, ps, 0.01) for ps in alone]
    step = StackedStep.build(opts_s)
    gen = torch.Generator().manual_seed(2)
    for i in range(6):
        if i == 3:
            opts_s[1].load_state_dict(copy.deepcopy(opts_s[1].state_dict()))
            stacked[2][0].data = stacked[2][0].data.clone()
        for ps_s, ps_a in zip(stacked, alone):
            for p, q in zip(ps_s, ps_a):
                g = torch.randn(p.shape, generator=gen, dtype=D)
                p.grad, q.grad = g.clone(), g.clone()
        step.step(opts_s, stacked, 0.0)
        for o in opts_a:
            o.step()
    for ps_s, ps_a, o_s, o_a in zip(stacked, alone, opts_s, opts_a):
        for p, q in zip(ps_s, ps_a):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
        s, a = o_s.state_dict()["state"], o_a.state_dict()["state"]
        for i in s:
            for key in s[i]:
                torch.testing.assert_close(s[i][key], a[i][key], rtol=0, atol=0)


def test_unsupported_optimizers_step_one_by_one():
    ps = _members(2)
    assert StackedStep.build([torch.optim.Adam(p, amsgrad=True) for p in ps]) is None
    assert StackedStep.build([torch.optim.SGD(p, lr=0.1, momentum=0.9) for p in ps]) is None
    assert StackedStep.build([torch.optim.Adam(ps[0]), torch.optim.Adam(ps[1][:2])]) is None  # other shapes
    opts = [torch.optim.Adam(p) for p in ps]
    before = copy.deepcopy(ps)
    assert StackedStep.build(opts).step(opts, ps, 0.0) is None  # no gradients: nothing done
    assert all(torch.equal(p, q) for a, b in zip(ps, before) for p, q in zip(a, b))


@pytest.mark.parametrize("K", [1, 3])
def test_gradient_norms_are_clip_grad_norms_bit_for_bit(K):
    """The logged norm of a step taken together is torch.nn.utils.clip_grad_norm_'s exactly (float32,
    the members' own parameter order); the update itself rounds in another order (one float32 step)."""
    gen = torch.Generator().manual_seed(1)
    members = [[torch.nn.Parameter(torch.randn(37, 29, generator=gen)) for _ in range(3)] for _ in range(K)]
    for ps in members:
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen)
    alone = [[torch.nn.Parameter(p.detach().clone()) for p in ps] for ps in members]
    for ps, qs in zip(members, alone):
        for p, q in zip(ps, qs):
            q.grad = p.grad.clone()
    opts = [torch.optim.SGD(ps, lr=0.1) for ps in members]
    norms = StackedStep.build(opts).step(opts, members, 0.5)
    for k, ps in enumerate(alone):
        want = torch.nn.utils.clip_grad_norm_(ps, 0.5)
        torch.optim.SGD(ps, lr=0.1).step()
        assert norms[k].item() == want.item()
        for a, b in zip(members[k], ps):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
