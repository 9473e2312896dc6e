"""The coRNN and LEM presets at their code protocol: ``<paper>/code/psmnist`` is the preset with
exactly the settings of ``OSCILLATOR_CODE_DIFFS`` changed, to the values of the authors' released
psMNIST scripts (file and line); the lr / 10 after epoch 100 runs as the exponential schedule with
one step; LEM's Kaiming-normal classifier weight is the readout init ``kaiming``."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import flat_config, preset_diff_keys
from rnnlab import config
from rnnlab.ledger import published, sources
from rnnlab.ledger.published_others import OSCILLATOR_CODE_DIFFS, OSCILLATOR_CODE_GAPS
from rnnlab.model import SequenceModel
from rnnlab.train import train

torch.set_num_threads(1)
TOOLS = Path(__file__).resolve().parents[2] / "tools"
CODE = sorted(p for p in published.PROTOCOLS if p.startswith(("cornn/code/", "lem/code/")))


def test_the_code_protocol_differs_from_the_preset_only_where_the_released_script_does():
    assert CODE == ["cornn/code/psmnist", "lem/code/psmnist"]
    for paper, diffs in OSCILLATOR_CODE_DIFFS.items():
        p = paper.replace("/", "/code/", 1)
        assert published.PROTOCOLS[p][:2] == (paper, "code") and published.protocol(paper) == "paper"
        assert preset_diff_keys(p, paper) == {k for k, *_ in diffs}, p
        code, text = flat_config(config.load(p).to_dict()), flat_config(config.load(paper).to_dict())
        for key, value, src, _what in diffs:
            assert code[key] == value and text.get(key) != value, (p, key)
            assert src.kind == "code" and re.search(r"\.py:\d", src.where), (p, key, src)
    r = subprocess.run([sys.executable, str(TOOLS / "oscillator_code_presets.py"), "--check"], capture_output=True)
    assert r.returncode == 0, r.stdout


def test_the_released_budgets_and_the_one_rate_step():
    """57,000 training images: coRNN's 475 batches of 120 an epoch, LEM's 445 full batches of 128
    (and one of 40, a gap); 120 epochs; the rate divided by 10 once, at the end of epoch 100."""
    for name, batch, per in (("cornn/code/psmnist", 120, 475), ("lem/code/psmnist", 128, 445)):
        cfg = config.load(name)
        t = cfg.train
        assert cfg.task.options["val_size"] == 3000 and (60000 - 3000) // batch == per == t.eval_every
        assert t.batch_size == batch and t.steps == 120 * per
        assert t.schedule == "exponential" and t.lr_gamma == 0.1 and t.lr_step_every == 100 * per
        # the trainer steps the schedule at every multiple of lr_step_every: once within the budget
        assert sum(s % t.lr_step_every == 0 for s in range(1, t.steps + 1)) == 1
    assert config.load("lem/code/psmnist").model.readout_init == "kaiming"
    assert config.load("cornn/code/psmnist").model.readout_init == "default"  # psMNIST/network.py:25


def test_the_exponential_schedule_steps_the_rate_once_as_the_released_scripts(tmp_path):
    """Run the schedule as the code presets set it, cut to 6 steps with the step at 4: the logged
    rate is the preset's until step 3 and a tenth of it from step 4 on."""
    sets = ["train.steps=6", "train.eval_every=6", "train.log_every=1", "train.schedule=exponential"]
    sets += ["train.lr_gamma=0.1", "train.lr_step_every=4", "model.cell=lem", "model.hidden_size=8"]
    sets += ["model.cell_options={}", "optim.group_lr={}", "task.L=5", "train.batch_size=4"]
    r = train(config.load("demo/asrnn", sets), tmp_path / "run")
    assert r["steps"] == 6
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lr = {row["step"]: row["lr"] for row in rows if "lr" in row}
    assert [lr[s] for s in (1, 2, 3)] == [1e-3] * 3
    assert [lr[s] for s in (4, 5, 6)] == pytest.approx([1e-4] * 3)


def test_the_kaiming_readout_is_torchs_kaiming_normal_and_leaves_the_bias():
    """N(0, 2 / fan-in) for the weight (the LEM script's nn.init.kaiming_normal_), the bias as
    torch's nn.Linear: U(+-1/sqrt(fan-in))."""
    torch.manual_seed(0)
    m = SequenceModel("lem", 1, 10, 512, readout_init="kaiming")
    w, b = m.readout.weight, m.readout.bias
    assert w.std().item() == pytest.approx(math.sqrt(2 / 512), rel=0.05)
    assert w.mean().abs().item() < 0.01 and w.abs().max().item() > 1 / math.sqrt(512)  # unbounded, not uniform
    assert b.abs().max().item() <= 1 / math.sqrt(512) and b.abs().max().item() > 0
    d = SequenceModel("lem", 1, 10, 512)
    assert d.readout.weight.std().item() == pytest.approx(1 / math.sqrt(3 * 512), rel=0.05)  # torch's uniform
    with pytest.raises(config.ConfigError, match="readout_init"):
        config.load("lem/psmnist", ["model.readout_init=kaiming_uniform"])


def test_the_pages_mark_every_difference_and_list_the_gaps():
    for paper in ("cornn", "lem"):
        page = sources.fidelity_page(paper)
        diffs = OSCILLATOR_CODE_DIFFS[f"{paper}/psmnist"]
        assert page.count("**differs**") == len(diffs) and "**no source**" not in page
        for p, _what, src, _ours in OSCILLATOR_CODE_GAPS:
            assert (str(src) in page) == (p == paper)


@pytest.mark.parametrize("name", CODE)
def test_every_code_preset_trains_two_steps(name, tmp_path, data_root):
    sets = [f"task.data_dir={str(data_root)!r}", "train.steps=2", "train.eval_every=1", "train.eval_max_batches=1"]
    sets += ["train.batch_size=4", "model.hidden_size=16"]
    r = train(config.load(name, sets), tmp_path / "run")
    assert r["steps"] == 2 and r["stopped"] == "completed"


def _released_cornn_step(W, b, x, y, z, dt, gamma, eps):
    """coRNN as the released cell computes it (psMNIST/network.py:13-18): one affine map of the
    concatenation [x; z; y]."""
    a = torch.tanh(torch.cat([x, z, y], 1) @ W.T + b)
    z = z + dt * (a - gamma * y - eps * z)
    return y + dt * z, z


def _released_lem_step(Wi, bi, Wh, bh, Wz, bz, x, y, z, dt):
    """LEM as the released cell computes it (src/psMNIST/network.py:21-33): input chunks
    (dt1, dt2, z, y), hidden chunks (dt1, dt2, y); dt2 gates z, dt1 gates y."""
    i_dt1, i_dt2, i_z, i_y = (x @ Wi.T + bi).chunk(4, 1)
    h_dt1, h_dt2, h_y = (y @ Wh.T + bh).chunk(3, 1)
    ms_dt_bar, ms_dt = dt * torch.sigmoid(i_dt1 + h_dt1), dt * torch.sigmoid(i_dt2 + h_dt2)
    z = (1 - ms_dt) * z + ms_dt * torch.tanh(i_y + h_y)
    return (1 - ms_dt_bar) * y + ms_dt_bar * torch.tanh(z @ Wz.T + bz + i_z), z


@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_the_cells_are_the_released_cells_with_their_weights_renamed(backend):
    """The audit's 'code' source for the cells and their init: rnnlab's coRNN and LEM, given the
    released cells' weights (drawn as the released init draws them) split into rnnlab's blocks,
    run the released recurrences to float64 rounding over 30 steps."""
    from rnnlab.cells import CoRNNCell, LEMCell

    torch.manual_seed(0)
    I, H, B, T = 3, 6, 4, 30
    x = torch.randn(T, B, I, dtype=torch.float64)
    k = 1 / math.sqrt(I + 2 * H)  # nn.Linear(I + 2H, H): U(+-1/sqrt(fan-in)), psMNIST/network.py:11
    W, b = (torch.empty(H, I + 2 * H, dtype=torch.float64).uniform_(-k, k), torch.empty(H).double().uniform_(-k, k))
    cell = CoRNNCell(I, H, dt=0.076, gamma=0.4, epsilon=8.0, backend=backend).double()
    with torch.no_grad():
        cell.weight_ih.copy_(W[:, :I]), cell.weight_hz.copy_(W[:, I : I + H]), cell.weight_hy.copy_(W[:, I + H :])
        cell.bias.copy_(b)
    y = z = torch.zeros(B, H, dtype=torch.float64)
    ys = []
    for t in range(T):
        y, z = _released_cornn_step(W, b, x[t], y, z, 0.076, 0.4, 8.0)
        ys.append(y)
    out, _ = cell.sequence(x)  # time-major (T, B, I)
    torch.testing.assert_close(out, torch.stack(ys), rtol=1e-10, atol=1e-12)

    k = 1 / math.sqrt(H)  # every LEM parameter U(+-1/sqrt(H)), src/psMNIST/network.py:16-19
    Wi, bi, Wh, bh, Wz, bz = (
        torch.empty(*s, dtype=torch.float64).uniform_(-k, k)
        for s in ((4 * H, I), (4 * H,), (3 * H, H), (3 * H,), (H, H), (H,))
    )
    lem = LEMCell(I, H, dt=0.31, backend=backend).double()
    blk = lambda t, order: torch.cat([t[j * H : (j + 1) * H] for j in order])  # noqa: E731
    with torch.no_grad():
        lem.weight_ih.copy_(blk(Wi, (1, 0, 3, 2))), lem.bias_ih.copy_(blk(bi, (1, 0, 3, 2)))
        lem.weight_hh.copy_(blk(Wh, (1, 0, 2))), lem.bias_hh.copy_(blk(bh, (1, 0, 2)))
        lem.weight_zy.copy_(Wz), lem.bias_zy.copy_(bz)
    y = z = torch.zeros(B, H, dtype=torch.float64)
    ys = []
    for t in range(T):
        y, z = _released_lem_step(Wi, bi, Wh, bh, Wz, bz, x[t], y, z, 0.31)
        ys.append(y)
    out, _ = lem.sequence(x)
    torch.testing.assert_close(out, torch.stack(ys), rtol=1e-10, atol=1e-12)
    # rnnlab's own init draws from the same ranges (the largest of 36 draws near the bound)
    w_hy, w_zy = CoRNNCell(I, H).weight_hy.abs().max(), LEMCell(I, H).weight_zy.abs().max()
    assert 0.8 / math.sqrt(I + 2 * H) < w_hy <= 1 / math.sqrt(I + 2 * H)
    assert 0.8 / math.sqrt(H) < w_zy <= 1 / math.sqrt(H)
