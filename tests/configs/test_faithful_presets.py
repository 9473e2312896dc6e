"""What the faithful presets need: asRNN with eps = 0 (the paper's PTB setting), the exponential
learning-rate schedule, the dense layer before the readout (DMU's NatLang), nnRNN's fixed-gamma
variant; the DMU real-data presets' sizes (Table IX) and one training step of every new preset
on small fixture files."""

import dataclasses
import gzip
import json
import struct
import zipfile

import numpy as np
import pytest
import torch
from torch import nn

from rnnlab import config
from rnnlab.cells.asrnn import ASRNNCell
from rnnlab.cells.nnrnn import NNRNNCell
from rnnlab.config import ConfigError
from rnnlab.ledger import published
from rnnlab.model import SequenceModel
from rnnlab.tasks.data import ptb_chars_from_words
from rnnlab.train import train

torch.set_num_threads(1)
D = torch.float64


# --- asRNN, eps = 0 ------------------------------------------------------------------------
def test_asrnn_eps0_is_the_exact_formula_with_d_equal_abs_s():
    """eps = 0: h = W_f^{-1} tanh(W_f z) with W_f = U_f diag(|s|), checked against a dense
    float64 inverse; the fast path equals the step loop."""
    torch.manual_seed(0)
    cell = ASRNNCell(4, 6, init="cayley", a=0.8, b=3.0, eps=0.0).double()
    with torch.no_grad():  # a dense U_f, so that W_f is not diagonal
        cell.parametrizations.weight_uf.original.add_(0.3 * torch.randn(6, 6, dtype=D))
    x, h0 = torch.randn(7, 2, 4, dtype=D), torch.randn(2, 6, dtype=D)
    U, d = cell.weight_uf.detach(), cell.diag_f.detach()
    assert torch.equal(d, cell.parametrizations.diag_f.original.detach().abs())
    W_f = U @ torch.diag(d)
    W_f_inv = torch.linalg.inv(W_f)
    h, expected = h0, []
    for t in range(7):
        z = x[t] @ cell.weight_ih.detach().T + cell.bias.detach() + h @ cell.weight_hh.detach().T
        h = torch.tanh(z @ W_f.T) @ W_f_inv.T
        expected.append(h)
    expected = torch.stack(expected)
    for backend in ("reference", "fast"):
        cell.backend = backend
        out, _ = cell.sequence(x, h0)
        torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-10)


def test_asrnn_eps0_refuses_a_zero_entry_of_d_f():
    with pytest.raises(ValueError, match="eps=0 with the init range"):
        ASRNNCell(3, 4, a=0.0, b=0.0, eps=0.0)  # the copy setting a = b = 0 would start at D_f = 0
    cell = ASRNNCell(3, 4, a=0.8, b=3.0, eps=0.0)
    with torch.no_grad():
        cell.parametrizations.diag_f.original[2] = 0.0
    x = torch.randn(5, 2, 3)
    for backend in ("reference", "auto"):
        cell.backend = backend
        with pytest.raises(FloatingPointError, match="1 entries of D_f"):
            cell.sequence(x)
    cell.eps = 1e-5  # any eps > 0 keeps d >= eps: no check, finite output
    cell.parametrizations.diag_f[0].eps = 1e-5
    assert torch.isfinite(cell.sequence(x)[0]).all()


def test_asrnn_ptb_presets_use_the_papers_eps0_and_train_one_step(tmp_path):
    from rnnlab.tasks.synthetic import CopyTask

    for T in (150, 300):
        cfg = config.load(f"asrnn/ptb_char-bptt{T}")
        assert cfg.model.cell_options["eps"] == 0.0 and cfg.model.cell_options["a"] > 0
    # the PTB cell options on a small copy task (no data needed): one finite step
    cfg = config.load(
        "asrnn/ptb_char-bptt300",
        ["model.hidden_size=8", "model.embedding=0", "train.steps=1", "train.eval_every=1", "train.schedule='none'"],
    )
    # (the copy task has no bpc: selection by its own primary metric)
    cfg = dataclasses.replace(
        cfg,
        task=config.TaskConfig("copy", {"K": 3, "L": 5, "val_size": 4, "test_size": 4}),
        train=dataclasses.replace(cfg.train, select_metric=""),
    )
    r = train(cfg, tmp_path / "run", progress=False, task=CopyTask(K=3, L=5, val_size=4, test_size=4))
    assert r["steps"] == 1 and np.isfinite(r["final"]["val/loss"])


# --- exponential schedule ------------------------------------------------------------------
def small_copy(extra=()):
    return config.load(
        "demo/lstm",
        [
            "task.L=4",
            "task.K=2",
            "task.val_size=4",
            "task.test_size=4",
            "model.hidden_size=4",
            "train.eval_every=2",
            "train.log_every=1",
            *extra,
        ],
    )


def test_exponential_schedule_multiplies_the_lr_every_n_steps_and_resumes(tmp_path):
    cfg = small_copy(
        [
            "train.steps=7",
            "train.schedule='exponential'",
            "train.lr_gamma=0.5",
            "train.lr_step_every=3",
            "optim.lr=0.01",
        ]
    )
    train(cfg, tmp_path / "a", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    lrs = {r["step"]: r["lr"] for r in rows if "lr" in r}
    assert lrs == {s: 0.01 * 0.5 ** (s // 3) for s in range(1, 8)}
    # interrupted at step 4 (a checkpoint) and resumed: the same schedule
    short = small_copy(
        [
            "train.steps=4",
            "train.schedule='exponential'",
            "train.lr_gamma=0.5",
            "train.lr_step_every=3",
            "optim.lr=0.01",
        ]
    )
    train(short, tmp_path / "b", progress=False)
    train(cfg, tmp_path / "b", resume=True, progress=False)
    rows_b = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert {r["step"]: r["lr"] for r in rows_b if "lr" in r} == lrs


def test_schedule_settings_are_validated():
    with pytest.raises(ConfigError, match="lr_gamma must be in"):
        small_copy(["train.schedule='exponential'", "train.lr_gamma=0.0"])
    with pytest.raises(ConfigError, match="lr_step_every must be >= 0"):
        small_copy(["train.lr_step_every=-1"])
    with pytest.raises(ConfigError, match="unknown schedule"):
        small_copy(["train.schedule='cosine'"])


# --- the dense layer -----------------------------------------------------------------------
def test_dense_layer_sits_between_the_recurrent_block_and_the_readout():
    torch.manual_seed(0)
    m = SequenceModel("gru", 3, 5, 6, dense=4).double()
    x = torch.randn(2, 7, 3, dtype=D)
    out, _ = m(x)
    h, _ = m.rnn(x)
    expected = nn.functional.linear(
        nn.functional.linear(h, m.dense.weight, m.dense.bias), m.readout.weight, m.readout.bias
    )
    torch.testing.assert_close(out, expected)
    plain = SequenceModel("gru", 3, 5, 6)
    assert m.parameter_counts()["elements"] - plain.parameter_counts()["elements"] == (6 * 4 + 4) + (4 * 5 + 5) - (
        6 * 5 + 5
    )
    with pytest.raises(ConfigError, match="model.dense must be >= 0"):
        small_copy(["model.dense=-1"])


# --- nnRNN fixed gamma ---------------------------------------------------------------------
def test_nnrnn_fixed_gamma_holds_the_moduli_through_training():
    torch.manual_seed(0)
    cell = NNRNNCell(3, 8, fixed_gamma=0.9)
    learned = NNRNNCell(3, 8)
    assert "gamma" not in dict(cell.named_parameters()) and "gamma" in dict(cell.named_buffers())
    assert cell.free_parameter_count() == learned.free_parameter_count() - 4
    opt = torch.optim.SGD(cell.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (cell.sequence(torch.randn(5, 2, 3))[0].pow(2).sum() + cell.regularization()).backward()
        opt.step()
    # the eigenvalues of Lambda (T is strictly below its 2x2 blocks) all have modulus 0.9
    lam = torch.linalg.eigvals(cell.schur_form().detach().double())
    torch.testing.assert_close(lam.abs(), torch.full((8,), 0.9, dtype=D), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="fixed_gamma"):
        NNRNNCell(3, 8, fixed_gamma=0.0)
    assert config.load("nnrnn/ptb-bptt150-fixed-gamma").model.cell_options["fixed_gamma"] == 1.0


# --- DMU real-data presets -----------------------------------------------------------------
def table9(exp, N):
    rows = [r for r in published.ROWS if r.table == "Table IX" and r.task == exp and r.size == f"N={N}"]
    assert len(rows) == 2 and rows[0].value == rows[1].value
    return rows[0].value


@pytest.mark.parametrize("N", [1, 2, 5, 10])
def test_dmu_polymusic_and_natlang_presets_have_table_ix_sizes(N):
    """RHN matches the printed count to its rounding; DMU (the paper's 'matching' architecture)
    within 0.5%."""
    for exp, stem, kw, unit in (
        ("PolyMusic", "polymusic", dict(input_size=88, output_size=88), 100),
        ("NatLang", "natlang", dict(input_size=0, output_size=10000, num_tokens=10000), 1e5),
    ):
        want = table9(exp, N)
        for module in ("rhn", "dmu"):
            m = config.load(f"dmu/{stem}-N{N}-{module}").model
            model = SequenceModel(
                m.cell,
                hidden_size=m.hidden_size,
                embedding=m.embedding,
                dense=m.dense,
                cell_options=m.cell_options,
                **kw,
            )
            n = model.parameter_counts()["elements"]
            if unit == 100 and want >= 1e5:  # printed as 127K, 228K
                unit = 1000
            if module == "rhn":
                assert round(n / unit) * unit == pytest.approx(want), (exp, N, n)
            else:
                assert abs(n - want) <= 0.005 * want + unit / 2, (exp, N, n)


def test_dmu_without_hidden_layers_is_one_linear_map_of_x_and_h():
    """The paper's depth 1 (layers=[]), as the DMU MNIST presets use it: [z; hhat] = W [x; h] + b;
    the fast path and the step loop both agree with this direct computation."""
    from rnnlab.cells.dmu import DMUCell

    torch.manual_seed(0)
    for I in (3, 5):  # I == H once: same shapes as a hidden layer, so a mix-up would not raise
        cell = DMUCell(I, 5, layers=[]).double()
        x, h0 = torch.randn(6, 2, I, dtype=D), torch.randn(2, 5, dtype=D)
        W, b = cell.fnn[0].weight.detach(), cell.fnn[0].bias.detach()
        h, expected = h0, []
        for t in range(6):
            z, hh = (torch.cat([x[t], h], 1) @ W.T + b).chunk(2, 1)
            g = torch.sigmoid(z)
            h = g * h + (1 - g) * torch.tanh(hh)
            expected.append(h)
        for backend in ("auto", "reference"):
            cell.backend = backend
            torch.testing.assert_close(cell.sequence(x, h0)[0], torch.stack(expected))


def test_dmu_mnist_presets_weights():
    for n, k in ((96, 20e3), (128, 34e3)):
        m = config.load(f"dmu/smnist-N{n}").model
        count = SequenceModel(
            "dmu", 1, 10, m.hidden_size, readout="last", cell_options=m.cell_options
        ).parameter_counts()
        assert abs(count["elements"] - k) <= 0.02 * k  # "~20K", "~34K"


# one training step of every new preset on fixture files (the real data sets are not needed)
def _fixtures(root):
    sio = pytest.importorskip("scipy.io")
    rng = np.random.RandomState(0)
    (root / "polyphonic").mkdir(parents=True)

    def cells(lengths):
        c = np.empty((1, len(lengths)), dtype=object)
        for i, T in enumerate(lengths):
            c[0, i] = (rng.rand(T, 88) < 0.1).astype(np.uint8)
        return c

    sio.savemat(
        root / "polyphonic" / "Nottingham.mat",
        {"traindata": cells([5, 9, 3, 7]), "validdata": cells([4, 6]), "testdata": cells([6])},
    )
    (root / "ptb").mkdir()
    words = "the cat sat on a mat and the dog ran to the cat".split()
    for split, n in (("train", 900), ("valid", 450), ("test", 450)):
        text = "\n".join(" ".join(rng.choice(words, 9)) for _ in range(n // 9))
        (root / "ptb" / f"ptb.{split}.txt").write_text(text + "\n")
        (root / "ptb" / f"ptb.char.{split}.txt").write_text(ptb_chars_from_words(text + "\n"))
    (root / "tatoeba").mkdir()
    pairs = [("Hi.", "Hola."), ("Run!", "Corre!"), ("I am here.", "Estoy aqui."), ("Go away.", "Vete.")] * 4
    for pair in ("spa-eng", "deu-eng"):
        with zipfile.ZipFile(root / "tatoeba" / f"{pair}.zip", "w") as z:
            z.writestr(f"{pair[:3]}.txt", "".join(f"{e}\t{s}\tCC-BY\n" for e, s in pairs))
    (root / "mnist").mkdir()

    def idx(path, array):
        header = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
        with gzip.open(path, "wb") as f:
            f.write(header + array.tobytes())

    idx(root / "mnist" / "train-images-idx3-ubyte.gz", rng.randint(0, 256, (12, 28, 28)).astype(np.uint8))
    idx(root / "mnist" / "train-labels-idx1-ubyte.gz", (np.arange(12) % 10).astype(np.uint8))
    idx(root / "mnist" / "t10k-images-idx3-ubyte.gz", rng.randint(0, 256, (4, 28, 28)).astype(np.uint8))
    idx(root / "mnist" / "t10k-labels-idx1-ubyte.gz", (np.arange(4) % 10).astype(np.uint8))
    return root


NEW = sorted(
    n
    for n in config.list_presets()
    if n.startswith(("dmu/polymusic", "dmu/natlang", "dmu/spa2eng", "dmu/ger2eng", "dmu/smnist-N", "dmu/psmnist-N"))
)
QUICK = [n for n in NEW if n.endswith(("N1-dmuc", "N2-rhn", "N10-dmu", "N96"))]


def train_on_fixtures(name, tmp_path, *extra, steps=2):
    """``name`` trained for ``steps`` steps of batch 2 on the fake data of ``_fixtures`` (files
    not verified, one evaluation batch at every step), then ``extra``: the result, its final
    metrics finite."""
    root = _fixtures(tmp_path / "data")
    sets = [
        "task.verify=false",
        f"train.steps={steps}",
        "train.eval_every=1",
        "train.batch_size=2",
        "train.eval_batch_size=4",
        "train.eval_max_batches=1",
        *extra,
    ]
    r = train(config.load(name, sets), tmp_path / "run", progress=False, data_dir=str(root))
    assert r["steps"] == steps and all(np.isfinite(v) for v in r["final"].values())
    return r


def _one_step(name, tmp_path):
    task = config.load(name).task.name
    extra = {
        "music": [],
        "ptb_word": ["task.bptt=8"],
        "translation": ["task.val_size=2", "task.test_size=2", "task.bleu_size=2"],
        "smnist": ["task.val_size=2"],
        "psmnist": ["task.val_size=2"],
    }[task]
    return train_on_fixtures(name, tmp_path, "train.lr_step_every=1", *extra)


@pytest.mark.parametrize("name", ["nnrnn/ptb-bptt150-fixed-gamma", "nnrnn/ptb-bptt150-lstm-n1024"])
def test_new_nnrnn_presets_train_a_step(name, tmp_path):
    r = train_on_fixtures(name, tmp_path, "task.bptt=8", "model.hidden_size=16", steps=1)
    assert "val/bpc" in r["final"]


def test_new_presets_all_load():
    assert len(NEW) == 52
    for name in NEW:
        config.load(name)


@pytest.mark.parametrize("name", QUICK)
def test_new_presets_train_a_step(name, tmp_path):
    r = _one_step(name, tmp_path)
    if name.endswith("dmuc"):  # DMU-C: the module's group at the plain learning rate
        assert r["param_groups"]["memory"]["lr"] == r["param_groups"]["default"]["lr"]
    elif "dmu" in r["param_groups"] and "memory" in r["param_groups"]:
        assert r["param_groups"]["memory"]["lr"] < r["param_groups"]["default"]["lr"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in NEW if n not in QUICK])
def test_every_new_preset_trains_a_step(name, tmp_path):
    _one_step(name, tmp_path)
