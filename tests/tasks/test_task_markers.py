"""Marker positions of the adding tasks: every admissible position is used, none outside."""

import torch

from rnnlab.tasks import TASKS


def test_adding_uses_every_position_of_each_half_and_nothing_else():
    for T in (10, 11):
        task = TASKS["adding"](T=T, val_size=1, test_size=1)
        b = task.make(5000, torch.Generator().manual_seed(0))
        marks = b.x[..., 1]
        assert set(marks.unique().tolist()) == {0.0, 1.0}
        assert (marks.sum(1) == 2).all()
        half = T // 2
        first = marks[:, :half].argmax(1)
        second = half + marks[:, half:].argmax(1)
        assert (marks[:, :half].sum(1) == 1).all() and (marks[:, half:].sum(1) == 1).all()
        assert set(first.tolist()) == set(range(half))
        assert set(second.tolist()) == set(range(half, T))
        # the target is the sum of the two marked values
        rows = torch.arange(len(first))
        torch.testing.assert_close(b.y[:, 0], b.x[rows, first, 0] + b.x[rows, second, 0])


def test_hs_adding_marker_positions_follow_the_specification():
    """First marker uniform over the first ten steps, the second uniform over the first
    len // 2 - 1 steps except the first marker's: the expected count of each position is
    sum over samples of 1/10 [p < 10] + (1 - [p < 10] / 10) / (M - 1) [p < M], M = len // 2 - 1."""
    task = TASKS["hs_adding"](L=40, val_size=1, test_size=1)
    n = 40000
    b = task.make(n, torch.Generator().manual_seed(0))
    ones = b.x[..., 1] == 1.0
    assert (ones.sum(1) == 2).all()
    pos = torch.arange(task.L_max)
    assert not (ones & (pos[None, :] >= b.lengths[:, None] - 1)).any()
    observed = ones.double().sum(0)
    M = (b.lengths // 2 - 1).double()[:, None]
    early = (pos < 10).double()[None, :]
    expected = (early / 10 + (pos[None, :] < M).double() * (1 - early / 10) / (M - 1)).sum(0)
    assert torch.equal(observed == 0, expected == 0), (observed, expected)
    tol = 5 * expected.sqrt() + 1
    assert ((observed - expected).abs() <= tol).all(), torch.stack([observed, expected])
    # -1 marks: the first step (unless marked 1) and each sequence's last valid step
    last = b.x[torch.arange(n), b.lengths - 1, 1]
    assert (last == -1).all()


def test_hs_adding_step0_mark_end_is_the_released_generator():
    """step0_mark="end" (the DMU authors' generator): step 0 is always marked -1 and keeps its
    random value; a pair element drawn there adds 0. Computed a second way, element by element
    as the released generator does: the pair positions are those of the default ("pair") task
    under the same generator state, whose targets are the same."""
    n = 4000
    pair = TASKS["hs_adding"](L=40, val_size=1, test_size=1)
    end = TASKS["hs_adding"](L=40, val_size=1, test_size=1, step0_mark="end")
    a = pair.make(n, torch.Generator().manual_seed(1))
    b = end.make(n, torch.Generator().manual_seed(1))
    assert (b.x[:, 0, 1] == -1.0).all() and (a.x[:, 0, 1] == 1.0).sum() > 100
    drawn_at_0 = a.x[:, 0, 1] == 1.0
    assert (b.x[drawn_at_0, 0, 0] != 0).all()  # the released generator keeps step 0's value
    assert ((b.x[:, 1:, 1] == 1.0).sum(1) == 2 - drawn_at_0.long()).all()
    for i in range(200):  # the target element by element: 0.5 + (x1 + x2) / 4, a mark at 0 adds 0
        L = int(b.lengths[i])
        x1x2 = sum(float(b.x[i, t, 0]) for t in range(1, L) if b.x[i, t, 1] == 1.0)
        assert abs(float(b.y[i, 0]) - (0.5 + x1x2 / 4)) < 1e-6
    torch.testing.assert_close(a.y, b.y)
