"""``rnnlab.export_onnx``: every layer the exporter can take runs in onnxruntime and equals the
eager layer (at another batch size than the example's); the complex-valued cells get a one-line
error; the model itself is left as it was (its parametrizations stay)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from torch.nn.utils import parametrize

import rnnlab
from rnnlab.cells import CELLS, Recurrent
from rnnlab.cells.onnx import COMPLEX_CELLS

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

EXPORTABLE = sorted(k for k, c in CELLS.items() if c.__name__ not in COMPLEX_CELLS)
FAST = {"asrnn"}  # a parametrized cell in the default suite (the LSTM below too); every other with -m slow


def _run(proto, *inputs):
    sess = ort.InferenceSession(proto.SerializeToString())
    feed = {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)}
    return sess.run(None, feed)


@pytest.mark.parametrize("key", [k if k in FAST else pytest.param(k, marks=pytest.mark.slow) for k in EXPORTABLE])
def test_exported_layer_equals_eager_at_another_batch_size(key):
    torch.manual_seed(0)
    layer = Recurrent(3, 6, cell=CELLS[key]).eval()
    proto = rnnlab.export_onnx(layer, (torch.randn(5, 2, 3),))
    x = torch.randn(5, 4, 3)  # batch 4, the example's 2
    with torch.no_grad():
        want, h_n = layer(x)
    got = _run(proto, x)
    scale = max(1.0, want.abs().max().item())
    assert np.abs(got[0] - want.numpy()).max() <= 1e-5 * scale


def test_batch_first_and_two_layers(tmp_path):
    torch.manual_seed(0)
    layer = rnnlab.LSTM(3, 5, 2, batch_first=True).eval()
    path = tmp_path / "lstm.onnx"
    rnnlab.export_onnx(layer, (torch.randn(2, 7, 3),), path)
    import onnx

    proto = onnx.load(str(path))
    x = torch.randn(6, 7, 3)
    with torch.no_grad():
        want, (h, c) = layer(x)
    got = _run(proto, x)
    assert np.abs(got[0] - want.numpy()).max() <= 1e-5
    assert np.abs(got[1] - h.numpy()).max() <= 1e-5  # the final state comes out too


def test_the_model_keeps_its_parametrizations():
    layer = rnnlab.ASRNN(3, 6).eval()
    before = [m for m in layer.modules() if parametrize.is_parametrized(m)]
    assert before
    x = torch.randn(4, 2, 3)
    with torch.no_grad():
        want = layer(x)[0]
    rnnlab.export_onnx(layer, (x,))
    assert [m for m in layer.modules() if parametrize.is_parametrized(m)] == before
    with torch.no_grad():  # and it still runs, to the same values
        assert torch.equal(layer(x)[0], want)


@pytest.mark.parametrize("name", ["EURNN", "URNN", "KRU"])
def test_complex_cells_are_refused_in_one_line(name):
    layer = getattr(rnnlab, name)(3, 6)
    with pytest.raises(TypeError, match="complex") as e:
        rnnlab.export_onnx(layer, (torch.randn(4, 2, 3),))
    assert "\n" not in str(e.value) and "torch.export" in str(e.value)


def test_without_onnxscript_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    with pytest.raises(ImportError, match=r'pip install "rnnlab\[onnx\]"'):
        rnnlab.export_onnx(rnnlab.LSTM(3, 4), (torch.randn(4, 2, 3),))


def test_the_docs_count_what_exports():
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "layers.md").read_text().split())
    assert f"{len(EXPORTABLE)} of the {len(CELLS)} cell families export" in text


@pytest.mark.parametrize("key, bidirectional", [("gru", False), ("lstm", True), ("asrnn", False), ("dmu", True)])
def test_a_layer_with_lengths_exports_and_equals_eager_at_another_batch_and_lengths(key, bidirectional):
    """Export with lengths ended in 125 lines of torch output and an error cut at "Next steps:"
    (the lengths' range check read their values, which a graph does not have)."""
    torch.manual_seed(0)
    layer = Recurrent(3, 4, cell=CELLS[key], bidirectional=bidirectional).eval()
    proto = rnnlab.export_onnx(layer, (torch.randn(5, 2, 3), None, torch.tensor([5, 3])))
    x, lengths = torch.randn(5, 3, 3), torch.tensor([2, 5, 4])  # another batch, other lengths
    with torch.no_grad():
        want, h_n = layer(x, None, lengths)
    got = _run(proto, x, lengths)
    leaves = h_n if isinstance(h_n, tuple) else (h_n,)
    for g, w in zip(got, (want, *leaves)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)
    assert np.all(got[0][2:, 0] == 0)  # past a length: zeros, as in eager


def test_a_model_the_exporter_cannot_capture_is_one_line_naming_where_and_the_fix(capfd):
    class Branchy(rnnlab.cells.RNNCell):
        def forward(self, x, h):
            h, _ = super().forward(x, h)
            if h.sum() > 0:  # a branch on a value: no graph holds it
                h = -h
            return h, h

    layer = Recurrent(3, 4, cell=Branchy)
    capfd.readouterr()
    with pytest.raises(RuntimeError) as info:
        rnnlab.export_onnx(layer, (torch.randn(5, 2, 3),))
    msg = str(info.value)
    assert len(msg.splitlines()) == 1 and "Next steps" not in msg and "\x1b[" not in msg, msg
    assert "test_onnx.py:" in msg and "torch.where" in msg, msg
    out, err = capfd.readouterr()
    assert out == "" and "def forward" not in err and len(err.splitlines()) <= 2, err
