"""Per-layer widths in stacked layers, and the DMU paper's Table VIII weight counts."""

import pytest
import torch

from rnnlab import config
from rnnlab.cells import CELLS, GRU, LSTM, Recurrent, unroll
from rnnlab.model import SequenceModel, build_model
from rnnlab.train import build_task


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru", "dmu", "rhn"])
def test_mixed_widths_equal_layers_run_one_after_another(cell):
    """A stack [3, 5, 2] is three single layers, each reading the previous one's outputs."""
    torch.manual_seed(0)
    stack = Recurrent(4, [3, 5, 2], cell=CELLS[cell]).double()
    assert stack.num_layers == 3 and stack.hidden_size == 2 and stack.hidden_sizes == [3, 5, 2]
    assert [(c.input_size, c.hidden_size) for c in stack.cells] == [(4, 3), (3, 5), (5, 2)]
    x = torch.randn(7, 2, 4, dtype=torch.double)
    out, h_n = stack(x)
    assert out.shape == (7, 2, 2) and isinstance(h_n, list) and len(h_n) == 3
    y, finals = x, []
    for c in stack.cells:
        y, s = unroll(c, y)
        finals.append(s)
    torch.testing.assert_close(out, y)
    for a, b in zip(h_n, finals):
        torch.testing.assert_close(a, b)
    # the per-layer final states continue the sequence: two halves equal the whole
    o1, s1 = stack(x[:3])
    o2, _ = stack(x[3:], s1)
    torch.testing.assert_close(torch.cat([o1, o2]), out)


def test_one_width_as_a_list_is_the_stacked_torch_layout():
    torch.manual_seed(0)
    a = LSTM(3, [4, 4])
    torch.manual_seed(0)
    b = LSTM(3, 4, num_layers=2)
    x = torch.randn(5, 2, 3)
    (oa, (ha, ca)), (ob, (hb, cb)) = a(x), b(x)
    assert ha.shape == hb.shape == (2, 2, 4)
    torch.testing.assert_close(oa, ob)
    torch.testing.assert_close(ca, cb)


def test_width_and_layer_count_disagree_is_one_clear_error():
    with pytest.raises(ValueError, match=r"num_layers must be 2"):
        GRU(3, [2, 3], num_layers=3)
    with pytest.raises(config.ConfigError, match=r"num_layers=3"):
        config.load("dmu/adding-gru", ["model.num_layers=3"])
    with pytest.raises(config.ConfigError, match=r"hidden_size must be a positive integer or a list"):
        config.load("dmu/adding-gru", ["model.hidden_size=[3, 0]"])


def test_mixed_widths_train_with_carried_state():
    """TBPTT detaches a list of per-layer (h, c) states."""
    from rnnlab.train import _detach

    m = SequenceModel("lstm", 3, 2, [2, 5], readout="all")
    out, state = m(torch.randn(4, 6, 3))
    assert out.shape == (4, 6, 2) and [s[0].shape[-1] for s in state] == [2, 5]
    d = _detach(state)
    assert isinstance(d, list) and not any(t.requires_grad for s in d for t in s)


# Table VIII of the DMU paper ("weights no."), all 15 entries. "model": the whole network
# (recurrent block + softmax/linear readout), as the paper counts for Adding and TempOrd.
# "block": the recurrent block alone: NoiseSeq's five counts all equal the block with 100
# inputs and no readout (e.g. RNN (5, 5): 5*100 + 5*5 + 2*5 + (5*5 + 5*5 + 2*5) = 595, while
# a 2-class readout would add 12), and Adding RHN ((4, 3)) = 136 is its block (2*4*2 + 3*(2*4*4
# + 2*4) = 136), while the four other Adding counts include the readout (RHN with it: 141).
TABLE_VIII = {
    "dmu/noisy_sequence-rnn": (595, "block"),
    "dmu/noisy_sequence-lstm": (880, "block"),
    "dmu/noisy_sequence-gru": (687, "block"),
    "dmu/noisy_sequence-rhn": (672, "block"),
    "dmu/noisy_sequence-dmu": (573, "block"),
    "dmu/adding-rnn": (111, "model"),
    "dmu/adding-lstm": (99, "model"),
    "dmu/adding-gru": (108, "model"),
    "dmu/adding-rhn": (136, "block"),
    "dmu/adding-dmu": (106, "model"),
    "dmu/temporal_order-rnn": (236, "model"),
    "dmu/temporal_order-lstm": (212, "model"),
    "dmu/temporal_order-gru": (208, "model"),
    "dmu/temporal_order-rhn": (224, "model"),
    "dmu/temporal_order-dmu": (203, "model"),
}


def test_table_viii_covers_every_dmu_synthetic_preset():
    presets = {
        p
        for p in config.list_presets()
        if p.startswith("dmu/") and p.split("/")[1].split("-")[0] in ("adding", "noisy_sequence", "temporal_order")
    }
    assert presets == set(TABLE_VIII)


@pytest.mark.parametrize("preset", sorted(TABLE_VIII))
def test_dmu_synthetic_presets_match_table_viii(preset):
    """At every protocol (paper, code, short): the whole network or the recurrent block, as the
    paper counts that entry; the code protocol's 100-way noisy readout changes only the readout."""
    from rnnlab.ledger import published

    weights, counted = TABLE_VIII[preset]
    for p in (preset, *published.at_other_protocols(preset)):
        cfg = config.load(p)
        model = build_model(cfg.model, build_task(cfg.task))
        n = sum(p.numel() for p in (model if counted == "model" else model.rnn).parameters())
        assert n == weights, p
        if preset.startswith("dmu/noisy_sequence"):
            assert model.rnn.input_size == 100


def test_the_ledger_counts_table_viii_as_the_paper_does():
    """The ledger's Table VIII rows compare the recurrent block ("params/recurrent": the run's
    parameter elements less its readout) exactly where the paper counts it, each with its reason."""
    from rnnlab.ledger import published, records

    rows = {(r.task, r.model): r for r in published.ROWS if r.table == "Table VIII"}
    assert len(rows) == 15
    for (task, model), r in rows.items():
        weights, counted = TABLE_VIII[f"dmu/{task}-{model.lower()}"]
        assert r.value == weights and r.metric == ("params/recurrent" if counted == "block" else "params")
        assert (counted == "block") == ((task, model) in published.DMU_T8_RECURRENT_ONLY)
        if counted == "block":
            assert published.DMU_T8_RECURRENT_ONLY[(task, model)] in r.note
    cfg = config.load("dmu/code/noisy_sequence-rnn").to_dict()
    assert records.readout_elements(cfg) == 5 * 100 + 100  # (5 -> 100 symbols) + bias


def test_per_layer_h0_of_the_wrong_length_is_one_clear_error():
    layer = GRU(3, [2, 4])
    x = torch.randn(5, 2, 3)
    with pytest.raises(ValueError, match=r"h0 must be a list of 2 per-layer states .* got a list of 1"):
        layer(x, [torch.zeros(2, 2)])
    out, h = layer(x, [torch.zeros(2, 2), torch.zeros(2, 4)])
    assert [s.shape for s in h] == [(2, 2), (2, 4)]


def test_seq2seq_with_per_layer_widths():
    from rnnlab.model import Seq2Seq

    m = Seq2Seq("gru", 7, 9, [4, 6])
    x, tgt = torch.randint(0, 7, (3, 5)), torch.randint(0, 9, (3, 4))
    logits, state = m(x, tgt_in=tgt)
    assert logits.shape == (3, 4, 9) and [s.shape[-1] for s in state] == [4, 6]


def test_per_layer_widths_with_bidirectional_layers():
    """Layer l reads 2 H_{l-1} features; h_n lists forward and backward states per layer."""
    torch.manual_seed(4)
    layer = GRU(3, [2, 4], bidirectional=True).double()
    assert [(c.input_size, c.hidden_size) for c in layer.cells] == [(3, 2), (3, 2), (4, 4), (4, 4)]
    x = torch.randn(6, 2, 3, dtype=torch.float64)
    out, h_n = layer(x)
    assert out.shape == (6, 2, 8) and [s.shape for s in h_n] == [(2, 2), (2, 2), (2, 4), (2, 4)]
    torch.testing.assert_close(h_n[2], out[-1, :, :4])  # forward direction of the last layer
    torch.testing.assert_close(h_n[3], out[0, :, 4:])  # backward direction ends at t = 0
    out2, _ = layer(x, h_n)  # a returned state is a valid h0
    assert out2.shape == out.shape
