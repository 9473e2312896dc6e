"""The DMU paper's real-data experiments (NatLang, PolyMusic) at the code protocol: each
``dmu/code/<experiment>-N<N>-<module>`` preset is its paper preset with exactly the settings of
``DMU_REAL_CODE_DIFFS`` changed, the rates are the released scripts' own, the fidelity page marks
every difference, and the ``model.dense_activation`` option they need (a ReLU after the dense
layer, as the released code has) leaves every other configuration as it was."""

import re

import pytest
import torch
from test_faithful_presets import train_on_fixtures

from conftest import flat_config
from rnnlab import config, rundir
from rnnlab.cells import CELLS
from rnnlab.ledger import published, sources
from rnnlab.ledger.published_dmu import DMU_REAL_CODE_DIFFS, DMU_REAL_CODE_GAPS
from rnnlab.model import SequenceModel

torch.set_num_threads(1)

REAL_CODE = sorted(p for p in published.PROTOCOLS if p.startswith(("dmu/code/natlang-", "dmu/code/polymusic-")))

#: The released scripts' flags, transcribed: (experiment, N) -> (learning-rate, learning-rate-rnn,
#: scheduler-gamma, weight-decay) of the DMU run (experiments_repro/nat_lang.sh:13-16,
#: poly_music.sh:13-16; no scheduler-gamma there: base_model.py:157-164's default 1.0), and the
#: RHN runs' (nat_lang.sh:19, poly_music.sh:19).
SCRIPT_DMU = {
    ("natlang", 1): (0.02, 0.01, 0.9, 1e-4),
    ("natlang", 2): (0.02, 0.005, 0.9, 1e-4),
    ("natlang", 5): (0.01, 0.001, 0.98, 1e-4),
    ("natlang", 10): (0.02, 0.001, 0.98, 1e-4),
    ("polymusic", 1): (0.005, 0.0025, 1.0, 1e-4),
    ("polymusic", 2): (0.005, 0.00125, 1.0, 1e-4),
    ("polymusic", 5): (0.005, 0.0005, 1.0, 1e-4),
    ("polymusic", 10): (0.005, 0.00025, 1.0, 1e-4),
}
SCRIPT_RHN = {"natlang": (0.02, 0.9, 1e-4), "polymusic": (0.005, 1.0, 1e-3)}


def _diff_keys(a: str, b: str) -> set[str]:
    """The settings where two presets differ, the recording keys included: the ledger counts
    ``train.eval_batch_size`` as one, but a language model's evaluation carries the state along
    each of its rows, so it is a setting of the code protocol here."""
    fa, fb = (flat_config(config.load(p).to_dict()) for p in (a, b))
    labels = ("name", "description", "paper.")
    return {k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k) and not k.startswith(labels)}


def test_the_real_code_presets_differ_from_the_paper_presets_only_where_the_released_scripts_do():
    assert REAL_CODE == sorted(f"dmu/code/{e}-N{n}-{m}" for e, n, m in DMU_REAL_CODE_DIFFS)
    assert {m for _e, _n, m in DMU_REAL_CODE_DIFFS} == {"dmu", "rhn"}  # no released script runs DMU-C
    for (e, n, m), diffs in DMU_REAL_CODE_DIFFS.items():
        p, paper = f"dmu/code/{e}-N{n}-{m}", f"dmu/{e}-N{n}-{m}"
        assert published.PROTOCOLS[p][:2] == (paper, "code")
        assert published.at_other_protocols(paper) == [p]
        assert _diff_keys(p, paper) == {k for k, *_ in diffs}, p
        flat = flat_config(config.load(p).to_dict())
        for key, value, src, _what in diffs:
            assert flat[key] == value, (p, key)
            assert src.kind == "code" and re.search(r"\.(py|yml|sh):\d", src.where), (p, key)


def test_the_code_presets_train_at_the_released_scripts_rates():
    """The DMU block's rate as rnnlab applies it (lr times the cell's group scale 1/(2n)) is
    the scripts' learning-rate-rnn; the rest at learning-rate; gamma and weight decay as passed."""
    for (e, n), (lr, lr_rnn, gamma, wd) in SCRIPT_DMU.items():
        cfg = config.load(f"dmu/code/{e}-N{n}-dmu")
        o, t, m = cfg.optim, cfg.train, cfg.model
        cell = CELLS["dmu"](input_size=8, hidden_size=m.hidden_size, **m.cell_options)
        assert o.lr == lr and o.group_lr == {} and o.weight_decay == wd, (e, n)
        assert o.lr * cell.group_scales()["memory"] == pytest.approx(lr_rnn), (e, n)
        assert (t.lr_gamma if t.schedule == "exponential" else 1.0) == gamma, (e, n)
        assert m.cell_options["z_bias"] == 0.0 and t.batch_size == 32
    for e, (lr, gamma, wd) in SCRIPT_RHN.items():
        for n in (1, 2, 5, 10):
            cfg = config.load(f"dmu/code/{e}-N{n}-rhn")
            assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.model.cell_options["depth"]) == (lr, wd, n)
            assert (cfg.train.lr_gamma if cfg.train.schedule == "exponential" else 1.0) == gamma
            assert cfg.model.cell_options["init"] == "linear" and cfg.model.hidden_size == 100
    # Table XI's PolyMusic DMU rate at depth 10 is 0.002; the script runs 0.005 (poly_music.sh:16)
    assert config.load("dmu/polymusic-N10-dmu").optim.lr == 0.002
    assert config.load("dmu/code/natlang-N5-dmu").model.dense_activation == "relu"
    assert config.load("dmu/code/polymusic-N5-dmu").task.options["predict_first"] is False


def test_the_real_data_page_marks_every_difference_and_lists_what_no_setting_expresses():
    page = sources.fidelity_page("dmu-real")
    assert page.count("**differs**") == sum(len(d) for d in DMU_REAL_CODE_DIFFS.values())
    assert "**no source**" not in page and "natlang-N5-dmuc" in page
    for _e, _what, src, _ours in DMU_REAL_CODE_GAPS:
        assert src.kind == "code" and re.search(r"\.(py|yml|sh):\d", src.where)
        assert str(src) in page
    assert "dmu/natlang-" not in sources.fidelity_page("dmu")  # the synthetic page keeps to its presets


@pytest.mark.parametrize("name", ["dmu/code/natlang-N2-dmu", "dmu/code/natlang-N1-rhn", "dmu/code/polymusic-N10-dmu"])
def test_a_real_code_preset_trains_two_steps(name, tmp_path):
    extra = ["task.bptt=8"] if "natlang" in name else []
    train_on_fixtures(name, tmp_path, "train.lr_step_every=1", *extra)


# --- model.dense_activation ------------------------------------------------------------------
def test_dense_activation_relu_follows_the_dense_layer_with_a_relu():
    torch.manual_seed(0)
    kw = dict(cell="gru", input_size=3, output_size=5, hidden_size=6, dense=4)
    linear, relu = SequenceModel(**kw), SequenceModel(**kw, dense_activation="relu")
    relu.load_state_dict(
        {k.replace("dense.", "dense.0.") if k.startswith("dense.") else k: v for k, v in linear.state_dict().items()}
    )
    assert "dense.weight" in linear.state_dict()  # the default keeps its parameter names (checkpoints)
    x = torch.randn(2, 7, 3)
    h, _ = linear.rnn(x)
    want_linear = linear.readout(linear.dense(h))
    want_relu = linear.readout(torch.relu(linear.dense(h)))
    assert torch.allclose(linear(x)[0], want_linear, atol=1e-6)
    assert torch.allclose(relu(x)[0], want_relu, atol=1e-6)
    assert not torch.allclose(want_linear, want_relu)
    with pytest.raises(ValueError, match="needs a dense layer"):
        SequenceModel(cell="gru", input_size=3, output_size=5, hidden_size=6, dense_activation="relu")


def test_dense_activation_is_checked_and_its_default_leaves_run_keys_as_they_were():
    cfg = config.load("dmu/natlang-N5-dmu").to_dict()
    old = config.load("dmu/natlang-N5-dmu").to_dict()
    del old["model"]["dense_activation"]
    assert rundir.config_key(cfg) == rundir.config_key(old)
    cfg["model"]["dense_activation"] = "relu"
    assert rundir.config_key(cfg) != rundir.config_key(old)
    with pytest.raises(config.ConfigError, match="model.dense_activation must be one of none, relu"):
        config.load("dmu/natlang-N5-dmu", ["model.dense_activation=gelu"])
    with pytest.raises(config.ConfigError, match="needs a dense layer"):
        config.load("dmu/polymusic-N5-dmu", ["model.dense_activation=relu"])
