"""Task.member_losses: E members' losses on their stacked outputs in one computation equal each
member's own Task.loss (float64), for every loss kind and readout, and the cases it cannot fuse
(masks, lengths under readout "all", a task's own loss) fall back to the loss member by member."""

import pytest
import torch

from rnnlab.tasks.base import Batch, Task

E, B, T = 5, 7, 6


def _task(loss_kind: str, readout: str, cls=Task) -> Task:
    task = cls()
    task.loss_kind, task.readout = loss_kind, readout
    return task


def _batches(loss_kind: str, readout: str, out_size: int, g: torch.Generator, lengths=False, mask=False):
    lead = (B,) if readout == "last" else (B, T)
    out = torch.randn(E, *lead, out_size, dtype=torch.float64, generator=g, requires_grad=True)
    batches = []
    for _ in range(E):
        if loss_kind == "ce":
            y = torch.randint(0, out_size, lead, generator=g)
            y[0] = -100  # ignored (F.cross_entropy's ignore_index): not counted in the mean
        elif loss_kind == "mse":
            y = torch.randn(*lead, out_size, dtype=torch.float64, generator=g)
        else:
            y = torch.rand(*lead, out_size, dtype=torch.float64, generator=g)
        ls = torch.randint(1, T + 1, (B,), generator=g) if lengths else None
        m = torch.rand(B, T, generator=g) < 0.7 if mask else None
        batches.append(Batch(torch.zeros(B, T, 1), y, ls, m))
    return out, batches


def _each(task, out, batches):
    return torch.stack([task.loss(o, b) for o, b in zip(out.unbind(0), batches)])


@pytest.mark.parametrize("readout", ["last", "all"])
@pytest.mark.parametrize("loss_kind,size", [("ce", 4), ("mse", 3), ("mse", 1), ("bce", 2)])
def test_member_losses_equal_each_members_own_loss_and_gradient(loss_kind, size, readout):
    g = torch.Generator().manual_seed(7)
    task = _task(loss_kind, readout)
    out, batches = _batches(loss_kind, readout, size, g)
    calls = []
    task.loss = lambda o, b: calls.append(1) or Task.loss(task, o, b)
    fused = task.member_losses(out, batches)
    assert not calls  # one computation for all members, not each member's loss
    own = _each(task, out, batches)
    assert fused.shape == (E,)
    torch.testing.assert_close(fused, own, rtol=1e-13, atol=0)
    w = torch.randn(E, dtype=torch.float64, generator=g)  # a weighted sum: each member's gradient apart
    (g_fused,) = torch.autograd.grad((fused * w).sum(), out)
    (g_own,) = torch.autograd.grad((own * w).sum(), out)
    torch.testing.assert_close(g_fused, g_own, rtol=1e-12, atol=1e-15)


def test_member_losses_count_only_the_targets_cross_entropy_counts():
    """All of a member's targets ignored but one: its loss is that one position's, as F.cross_entropy's."""
    g = torch.Generator().manual_seed(1)
    task = _task("ce", "last")
    out, batches = _batches("ce", "last", 3, g)
    batches[2].y[:] = -100
    batches[2].y[4] = 1
    loss = task.member_losses(out, batches)
    expect = torch.nn.functional.cross_entropy(out[2, 4:5], torch.tensor([1]))
    torch.testing.assert_close(loss[2], expect, rtol=1e-13, atol=0)


@pytest.mark.parametrize("lengths,mask", [(True, False), (False, True)])
def test_member_losses_fall_back_where_positions_are_masked(lengths, mask):
    g = torch.Generator().manual_seed(3)
    task = _task("ce", "all")
    out, batches = _batches("ce", "all", 4, g, lengths, mask)
    for b in batches:
        b.y[0] = 0  # (no ignored targets: masks and lengths choose the counted positions)
    calls = []
    real = task.loss
    task.loss = lambda o, b: calls.append(1) or real(o, b)
    torch.testing.assert_close(task.member_losses(out, batches), _each(task, out, batches), rtol=0, atol=0)
    assert len(calls) == 2 * E  # the fallback: each member's own loss


def test_member_losses_use_a_tasks_own_loss():
    class Halved(Task):
        loss_kind, readout = "mse", "last"

        def loss(self, out, batch):
            return super().loss(out, batch) / 2

    g = torch.Generator().manual_seed(5)
    task = Halved()
    out, batches = _batches("mse", "last", 2, g)
    torch.testing.assert_close(task.member_losses(out, batches), _each(task, out, batches), rtol=0, atol=0)
    torch.testing.assert_close(task.member_losses(out, batches), _each(_task("mse", "last"), out, batches) / 2)
