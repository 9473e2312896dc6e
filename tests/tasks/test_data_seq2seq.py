"""The encoder-decoder used by the translation task."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from rnnlab.model import Seq2Seq

torch.set_num_threads(1)


def make(cell="gru", **kw):
    torch.manual_seed(0)
    return Seq2Seq(cell, src_vocab=11, tgt_vocab=9, hidden_size=6, embedding=kw.pop("embedding", 5), **kw).double()


def data(B=3, S=5, T=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 11, (B, S), generator=g)
    lengths = torch.tensor([5, 3, 1][:B])
    tgt_in = torch.randint(4, 9, (B, T), generator=g)
    tgt_in[:, 0] = 1
    return src, lengths, tgt_in


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru", "exprnn"])
def test_shapes_and_cells(cell):
    m = make(cell)
    src, lengths, tgt_in = data()
    out, _ = m(src, None, lengths, tgt_in=tgt_in)
    assert out.shape == (3, 4, 9)
    assert m.generate(src, lengths, max_len=6).shape[0] == 3


def test_source_padding_is_ignored():
    m = make()
    src, lengths, tgt_in = data()
    a, _ = m(src, None, lengths, tgt_in=tgt_in)
    src2 = src.clone()
    for i, n in enumerate(lengths.tolist()):
        src2[i, n:] = 0
    b, _ = m(torch.cat([src2, torch.zeros(3, 2, dtype=torch.long)], 1), None, lengths, tgt_in=tgt_in)
    torch.testing.assert_close(a, b)


def test_full_teacher_mask_equals_fast_path():
    m = make("lstm", num_layers=2)
    src, lengths, tgt_in = data()
    fast, _ = m(src, None, lengths, tgt_in=tgt_in)
    slow, _ = m(src, None, lengths, tgt_in=tgt_in, teacher_mask=torch.ones(3, 4, dtype=torch.bool))
    step = m(
        src,
        None,
        lengths,
        tgt_in=tgt_in,
        teacher_mask=torch.tensor([[True, True, True, True]] * 2 + [[True, True, True, False]]),
    )[0]
    torch.testing.assert_close(fast, slow)
    torch.testing.assert_close(step[:, :3], fast[:, :3])  # the step loop agrees until the masks differ
    assert not torch.allclose(step[2, 3], fast[2, 3])


def test_zero_teacher_forcing_feeds_own_greedy_predictions():
    """teacher ratio 0: the decoder input after <sos> is its own argmax, i.e. greedy decoding."""
    m = make()
    src, lengths, tgt_in = data(T=6)
    logits, _ = m(src, None, lengths, tgt_in=tgt_in, teacher_mask=torch.zeros(3, 6, dtype=torch.bool))
    greedy = m.generate(src, lengths, max_len=6)
    k = greedy.shape[1]
    assert torch.equal(logits.argmax(-1)[:, :k], greedy)


def test_from_config_and_param_groups():
    task = SimpleNamespace(num_tokens=11, output_size=9, bos_id=1, eos_id=2)
    cfg = SimpleNamespace(cell="exprnn", hidden_size=6, num_layers=1, embedding=0, dropout=0.0, cell_options={})
    m = Seq2Seq.from_config(cfg, task)
    groups = m.param_groups()
    ids = [id(p) for ps in groups.values() for p in ps]
    assert len(ids) == len(set(ids)) == len(list(m.parameters()))
    counts = m.parameter_counts()
    assert counts["free"] <= counts["elements"]


def test_learns_a_copy_mapping():
    """A few Adam steps on 'translate x to x' cut the token cross-entropy well below uniform."""
    torch.manual_seed(0)
    m = Seq2Seq("gru", src_vocab=8, tgt_vocab=8, hidden_size=32, embedding=8)
    opt = torch.optim.Adam(m.parameters(), lr=0.02)
    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        src = torch.randint(4, 8, (32, 3), generator=g)
        tgt_in = torch.cat([torch.full((32, 1), 1), src], 1)
        y = torch.cat([src, torch.full((32, 1), 2)], 1)
        out, _ = m(src, None, None, tgt_in=tgt_in)
        loss = F.cross_entropy(out.reshape(-1, 8), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.3 * torch.log(torch.tensor(8.0)).item()
    assert torch.equal(m.generate(src, None, max_len=4)[:, :3], src)
