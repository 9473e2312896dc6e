"""Where every outcome setting of a paper preset comes from, and the papers' fidelity pages.

An *outcome setting* is anything of a preset that can change what its runs show: the task and
each of its options (given or defaulted), the model's shape, each option of its cell (given or
defaulted) and its initialisation, the readout, the optimizer and every rate, clipping, batch,
budget, evaluation and stop rule (:func:`outcome_settings`). Each has a :class:`Source`:
``text`` (the paper's section or table), ``code`` (the authors' released repository: file and
line at its commit) or ``ours`` (with the reason). ``SOURCES`` holds them as rules (preset
pattern, setting pattern, source), the first match deciding; a preset of ``AUDITED`` with an
outcome setting no rule covers fails ``tests/ledger/test_sources.py``. ``PENDING`` lists the
paper presets not audited yet: the test lets it only shrink.

``fidelity_page(paper)`` writes the page of one paper (``docs/fidelity/<paper>.md``): every
setting of every audited preset with its value and source, and where text and code differ.
"""

from __future__ import annotations

import fnmatch
import inspect

from . import sources_dmu_other, sources_dmu_real, sources_others
from .published_dmu import DMU_CODE_DIFFS, DMU_CODE_REPO, DMU_REAL_CODE_GAPS, DMU_TRANSLATION_CODE_GAPS
from .published_nnrnn import NNRNN_CODE_REPO
from .published_others import CORNN_CODE_REPO, LEM_CODE_REPO, OSCILLATOR_CODE_GAPS
from .rows import OPEN_SETTINGS, PROTOCOLS, Source, code_source, ours_source, protocol, text_source
from .sources_asrnn import ASRNN_AUDITED, ASRNN_CODE_REPO, ASRNN_CODE_UNMODELLED, ASRNN_SOURCES
from .sources_nnrnn import NNRNN_AUDITED, NNRNN_SOURCES

_NOT_OUTCOME = {"bias"}  # a cell's bias switch is a structural option: sourced as "model.cell"

#: optimizer -> its own hyperparameters (the others of OptimConfig do not act)
_OPTIM_KEYS = {"adam": ("beta1", "beta2", "eps"), "rmsprop": ("alpha", "eps", "momentum"), "sgd": ("momentum",)}


def _ctor_options(cls, skip=("self", "seed", "input_size", "hidden_size", "backend")) -> dict:
    out = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in skip or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        out[name] = p.default
    return out


def outcome_settings(preset: str) -> dict[str, object]:
    """The outcome settings of ``preset`` (dotted keys as ``--set`` spells them) with their values:
    given in the preset, or the default it runs with."""
    from .. import config
    from ..cells import CELLS
    from ..tasks import TASKS
    from ..tasks.text import LanguageModelTask

    cfg = config.load(preset)
    t, m, o, tr = cfg.task, cfg.model, cfg.optim, cfg.train
    out: dict[str, object] = {"task.name": t.name}
    for k, default in _ctor_options(TASKS[t.name]).items():
        out[f"task.{k}"] = t.options.get(k, default)
    out.update({f"model.{k}": getattr(m, k) for k in ("cell", "hidden_size", "num_layers", "embedding", "dropout")})
    out.update({f"model.{k}": getattr(m, k) for k in ("pool", "dense")})
    if m.dense:  # the activation after a dense layer acts only where there is one
        out["model.dense_activation"] = m.dense_activation
    if m.embedding:
        out["model.embedding_init"] = "torch.nn.Embedding's N(0, 1)"
    for k, default in _ctor_options(CELLS[m.cell]).items():
        if k not in _NOT_OUTCOME:
            out[f"model.cell_options.{k}"] = m.cell_options.get(k, default)
    if m.embedding > 0:
        out["model.embedding_init"] = m.embedding_init
    out["model.init"] = f"{m.cell}'s initialisation"  # every weight and bias the options above leave
    out["model.readout"] = (
        "linear, torch.nn.Linear's init" if m.readout_init == "default" else f"linear, {m.readout_init}"
    )
    out.update({"optim.name": o.name, "optim.lr": o.lr, "optim.weight_decay": o.weight_decay, "optim.clip": o.clip})
    out.update({f"optim.{k}": getattr(o, k) for k in _OPTIM_KEYS.get(o.name, ())})
    out.update({f"optim.group_lr.{k}": v for k, v in o.group_lr.items()})
    out.update({f"optim.group_weight_decay.{k}": v for k, v in o.group_weight_decay.items()})
    out.update({f"train.{k}": getattr(tr, k) for k in ("steps", "batch_size", "eval_every", "schedule")})
    if tr.schedule == "exponential":
        out.update({f"train.{k}": getattr(tr, k) for k in ("lr_gamma", "lr_step_every")})
    if isinstance(TASKS[t.name], type) and issubclass(TASKS[t.name], LanguageModelTask):
        out["train.eval_batch_size"] = tr.eval_batch_size  # the rows evaluation carries the state along
    if tr.schedule == "plateau":
        out.update({f"train.{k}": getattr(tr, k) for k in ("plateau_factor", "plateau_patience", "plateau_threshold")})
    out.update({f"train.{k}": getattr(tr, k) for k in ("select_metric", "target_metric", "target_value")})
    out.update({f"train.{k}": getattr(tr, k) for k in ("target_patience", "epoch_steps")})
    return out


# --- the sources ------------------------------------------------------------------------------
_text, _code, _ours = text_source, code_source, ours_source  # one home: rnnlab.ledger.rows


_SYN = ["dmu/adding-*", "dmu/temporal_order-*", "dmu/noisy_sequence-*"]
_SYN_ALL = _SYN + ["dmu/code/adding-*", "dmu/code/temporal_order-*", "dmu/code/noisy_sequence-*"]
_BUDGET = "200 batches of 32 an epoch, 100 epochs (Table X: '200 sequences per epoch', no batch size)"
_HENAFF = "henaff/*"
_HENAFF_OPEN = OPEN_SETTINGS["henaff/"]

#: (preset patterns, setting patterns, source): the first rule matching both decides.
SOURCES: list[tuple[list[str], list[str], Source]] = [
    # --- asRNN: copy and MNIST at n=122 (rnnlab.ledger.sources_asrnn)
    *ASRNN_SOURCES,
    # --- DMU NatLang and PolyMusic (their own module)
    *sources_dmu_real.RULES,
    # --- DMU translation and Table IV's MNIST (rnnlab.ledger.sources_dmu_other)
    *sources_dmu_other.RULES,
    # --- DMU synthetic: the code protocol's own differences first (each with its file and line)
    *(
        ([f"dmu/code/{task}-{m}"], [key], src)
        for (task, m), diffs in DMU_CODE_DIFFS.items()
        for key, _v, src, _what in diffs
    ),
    (_SYN_ALL, ["task.name"], _text("Sec. IV: Hochreiter & Schmidhuber's Exp. 4 (adding), 6b (order), 2b (noisy)")),
    (_SYN_ALL, ["task.L"], _text("Sec. IV and Table X: minimum length 100 (lengths 100-110)")),
    (_SYN, ["task.variable_length"], _text("Sec. IV: lengths L_min to L_min + L_min/10")),
    (_SYN, ["task.classes"], _text("Sec. IV-C: the answer is the first symbol, x or y")),
    (["dmu/adding-*"], ["task.step0_mark"], _text("Hochreiter & Schmidhuber Exp. 4: first and last steps marked -1")),
    (_SYN_ALL, ["task.target"], _text("Hochreiter & Schmidhuber Exp. 4: target 0.5 + (x1 + x2) / 4")),
    (_SYN_ALL, ["task.noise_symbols"], _text("Table VIII: the weight counts imply 100 input symbols")),
    (_SYN_ALL, ["task.fixed"], _text("Sec. IV-C: noise drawn anew (Exp. 2b, not the noise-free 2a)")),
    (_SYN_ALL, ["task.val_size", "task.test_size"], _code("deep_memory_update/data/data_module.py:155-158")),
    (_SYN_ALL, ["model.cell", "model.hidden_size", "model.num_layers"], _text("Table VIII's recurrent blocks")),
    (_SYN_ALL, ["model.cell_options.depth", "model.cell_options.layers"], _text("Table VIII's recurrent blocks")),
    (
        _SYN_ALL,
        ["model.embedding", "model.dropout", "model.pool", "model.dense", "model.dense_activation"],
        _code("deep_memory_update/models/base_model.py:220-240", "the recurrent block and one linear readout"),
    ),
    (_SYN_ALL, ["model.readout"], _code("deep_memory_update/models/base_model.py:237 (nn.Linear)")),
    (
        _SYN_ALL,
        ["model.cell_options.z_bias"],
        _text("Sec. III: a positive scalar added to the z bias", "3: experiments_repro/*.sh increased-bias=3"),
    ),
    (
        _SYN_ALL,
        ["model.cell_options.activation"],
        _code("deep_memory_update/layers/dmu.py:133-137", "tanh of hhat; the hidden layers: leaky ReLU, dmu.py:62"),
    ),
    (
        ["dmu/*-dmu", "dmu/code/*-dmu"],
        ["model.init"],
        _code("deep_memory_update/layers/dmu.py:28-33, 87-104", "Xavier uniform, zero biases"),
    ),
    (
        ["dmu/*-rnn", "dmu/code/*-rnn", "dmu/*-gru", "dmu/code/*-gru", "dmu/*-lstm", "dmu/code/*-lstm"],
        ["model.init", "model.cell_options.nonlinearity", "model.cell_options.init", "model.cell_options.*_init"],
        _code("deep_memory_update/layers/native_rnn_layer.py:9-48", "torch's nn.RNN/GRU/LSTM"),
    ),
    (
        ["dmu/*-lstm"],
        ["model.cell_options.forget_bias", "model.cell_options.forget_bias_hh"],
        _ours("the text gives no forget bias; torch's init (the released code: 2 + 2, the code protocol)"),
    ),
    (
        ["dmu/*-rhn"],
        ["model.cell_options.transform_bias", "model.cell_options.init", "model.init"],
        _ours("the text gives no RHN init: Zilly et al.'s carry bias -2 (the released code: nn.Linear's)"),
    ),
    (
        ["dmu/code/*-rhn"],
        ["model.cell_options.transform_bias", "model.init"],
        _code("deep_memory_update/layers/rhn.py:12-15, 27-28", "unused under init='linear'"),
    ),
    (
        _SYN_ALL,
        ["optim.name", "optim.beta1", "optim.beta2", "optim.eps"],
        _code("deep_memory_update/models/base_model.py:107-110, 142-147", "Adam, torch's defaults"),
    ),
    (_SYN_ALL, ["optim.lr"], _text("Table X", "experiments_repro/*.sh pass the same rates")),
    (_SYN, ["optim.group_lr.memory"], _text("Sec. IV: lr/(2n) does not apply to the synthetic tasks: Table X's rate")),
    (_SYN_ALL, ["optim.weight_decay"], _code("deep_memory_update/models/base_model.py:150-155 (0)")),
    (
        _SYN_ALL,
        ["optim.clip"],
        _code(
            "deep_memory_update/experiments/experiment.py:74",
            "pl.Trainer from the flags; no gradient_clip_val in guild.yml or the scripts: no clipping",
        ),
    ),
    (_SYN_ALL, ["train.steps", "train.epoch_steps", "train.batch_size"], _code("guild.yml:19 steps: 200", _BUDGET)),
    (
        _SYN_ALL,
        ["train.eval_every"],
        _code(
            "deep_memory_update/experiments/experiment.py:74",
            "no check_val_every_n_epoch in guild.yml or the scripts: validation once an epoch",
        ),
    ),
    (_SYN_ALL, ["train.schedule"], _code("deep_memory_update/models/base_model.py:158-163 (gamma 1: none)")),
    (
        _SYN_ALL,
        ["train.target_metric", "train.target_value", "train.target_patience"],
        _code("deep_memory_update/models/utils.py:244-334 (loss/val below 1e-6, patience 5)"),
    ),
    (
        _SYN_ALL,
        ["train.select_metric"],
        _code("deep_memory_update/experiments/experiment.py:75-95", "test on the best validation checkpoint"),
    ),
    # --- Henaff et al.: what the text fixes, the rest ours (OPEN_SETTINGS)
    (["henaff/copy-*", "henaff/adding-*"], ["task.name"], _text("Sec. 3.1-3.2: the copy and addition tasks")),
    (["henaff/copy_variable-*"], ["task.name", "task.L"], _text("Sec. 4.3: variable-length copy at T = 100")),
    (["henaff/*-T750"], ["task.L", "task.T"], _text("Sec. 4.1: T = 750")),
    (
        ["henaff/copy-*", "henaff/adding-*"],
        ["task.L", "task.T"],
        _ours("the first timescale is not in the text: T=500"),
    ),
    (
        [_HENAFF],
        ["task.K", "task.alphabet", "task.encoding", "task.L_min"],
        _ours("the text gives no symbol count: 10 symbols from 8, the usual copy task"),
    ),
    (["henaff/copy*"], ["model.hidden_size"], _text("Sec. 4.1: 80 hidden units for copy")),
    (["henaff/adding-*"], ["model.hidden_size"], _text("Sec. 4.1: 128 hidden units for addition")),
    ([_HENAFF], ["model.cell", "model.cell_options.activation"], _text("Sec. 2.2: LT-RNN, ReLU on the input path")),
    (
        ["henaff/*-lstm"],
        ["model.cell_options.init"],
        _ours("the text gives no input, bias or readout init: rnnlab's defaults"),
    ),
    ([_HENAFF], ["model.cell_options.init"], _text("Sec. 4.1: identity (LT-IRNN) or random orthogonal (LT-ORNN)")),
    ([_HENAFF], ["model.pool"], _text("Sec. 2.3: l2 pooling", "pool size k = 2 is ours: the text gives none")),
    (
        [_HENAFF],
        ["model.init", "model.readout", "model.cell_options.*", "model.num_layers", "model.embedding"],
        _ours("the text gives no input, bias or readout init: rnnlab's defaults"),
    ),
    ([_HENAFF], ["model.dropout", "model.dense", "model.dense_activation"], _ours("none: the text names none")),
    ([_HENAFF], ["optim.*", "train.*"], _ours(_HENAFF_OPEN)),
    ([_HENAFF], ["task.val_size", "task.test_size"], _ours("the text gives no evaluation set sizes")),
    # --- nnRNN (rnnlab.ledger.sources_nnrnn)
    *NNRNN_SOURCES,
    # --- coRNN and LEM (rnnlab.ledger.sources_others)
    *sources_others.RULES,
]

#: The paper presets whose every outcome setting must have a source.
AUDITED = _SYN_ALL + sources_dmu_real.PRESETS + ["dmu/code/natlang-*", "dmu/code/polymusic-*"] + [_HENAFF]
AUDITED += ASRNN_AUDITED + NNRNN_AUDITED
AUDITED += sources_others.AUDITED + sources_dmu_other.PRESETS
#: The paper presets not audited yet against their text and released code (the test lets this
#: list only shrink): until then their verdicts rest on settings whose source is not shown.
PENDING: list[str] = []


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def source_of(preset: str, key: str) -> Source | None:
    for presets, keys, src in SOURCES:
        if _matches(preset, presets) and _matches(key, keys):
            return src
    return None


def paper_presets() -> list[str]:
    """Every preset of the papers' rows at the paper protocol (or ours), the code-protocol
    presets, and no variant or cheaper protocol."""
    from .. import config
    from .published import ROWS, VARIANTS

    known = set(config.list_presets())
    out = set()
    for r in ROWS:
        for p in r.presets:
            if p not in VARIANTS and protocol(p) != "short" and p in known:
                out.add(p)
    out |= {p for p, (_b, proto, _w) in PROTOCOLS.items() if proto == "code"}
    return sorted(out)


def audited(preset: str) -> bool:
    return _matches(preset, AUDITED)


def unsourced(preset: str) -> list[str]:
    """The outcome settings of ``preset`` that no rule of ``SOURCES`` covers."""
    return [k for k in outcome_settings(preset) if source_of(preset, k) is None]


# --- the fidelity pages -----------------------------------------------------------------------
def _cell(v) -> str:
    return f"`{v!r}`" if not isinstance(v, str) else f"`{v}`"


def _preset_table(p: str, code: str | None, ours_count: dict) -> list[str]:
    """One preset's section of a fidelity page: every outcome setting, its value (and the code
    protocol's beside it, ``**differs**`` where it does) and its source; counts the settings of ours."""
    here = outcome_settings(p)
    there = outcome_settings(code) if code else {}
    head = ["setting", f"`{p}`"] + ([f"`{code}`"] if code else []) + ["source"]
    rows = []
    for k, v in here.items():
        src = source_of(p, k)
        cv = there.get(k, v)
        differs = code and cv != v
        cells = [k, _cell(v)] + ([_cell(cv) + (" **differs**" if differs else "")] if code else [])
        text = str(src) if src else "**no source**"
        if differs:
            text += f"; released: {source_of(code, k)}"
        cells.append(text)
        rows.append(cells)
        if src is not None and src.kind == "ours":
            ours_count[p] = ours_count.get(p, 0) + 1
    for k, cv in there.items():  # settings only the code protocol has (the plateau schedule's)
        if k not in here:
            rows.append([k, "(none)", f"{_cell(cv)} **differs**", f"released: {source_of(code, k)}"])
    lines = [f"## `{p}`", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return lines + [""]


_GAPS = "What the released code does that no setting expresses"
_KEPT = "The code-protocol presets keep rnnlab's way here:"


def _gaps_table(rows, head=("the released code", "source", "rnnlab"), title=_GAPS, intro=_KEPT) -> list[str]:
    """A page's section on how the released code runs otherwise than any setting says: a table of
    ``rows`` (tuples of cells, ``head`` their columns) under ``title`` and ``intro``."""
    lines = [f"## {title}", "", intro, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return lines + [""]


#: the DMU page's line on Table IV (pixel MNIST), whose presets run the ``ours`` protocol
_TABLE_IV = (
    f"Table IV (MNIST): {sources_dmu_other.NO_MNIST}; its settings beyond N are ours, so its presets "
    "run the `ours` protocol (`rnnlab.ledger.rows.OPEN_SETTINGS`): their runs never refute a claim "
    "that something works."
)


def fidelity_page(paper: str) -> str:
    """``docs/fidelity/<paper>.md``: each audited preset of ``paper``, every outcome setting with
    its value and source; where a code-protocol preset exists, its value beside the text's."""
    real = paper == "dmu-real"  # the DMU paper's real-data presets: a page of their own
    real_presets = sources_dmu_real.ALL + sources_dmu_other.PRESETS

    def on_page(p: str) -> bool:
        if not audited(p) or (paper == "dmu" and _matches(p, real_presets)):
            return False
        return _matches(p, real_presets) if real else p.startswith(f"{paper}/")

    code_of = {base: p for p, (base, proto, _w) in PROTOCOLS.items() if proto == "code"}
    # the paper presets of the rows, and those whose code protocol runs (a baseline no row names)
    presets = sorted({p for p in [*paper_presets(), *code_of] if on_page(p)})
    lines = [
        f"# Fidelity: {'dmu, real data (NatLang, PolyMusic, translation, MNIST)' if real else paper}",
        "",
        "<!-- generated by rnnlab.ledger.sources.fidelity_page; tests/ledger/test_sources.py keeps it equal -->",
        "",
        "Every setting of the paper's presets that can change an outcome, with its value and where it comes",
        "from: `text` (the paper), `code` (the authors' released code"
        + (
            {
                "dmu": f", {DMU_CODE_REPO}",
                "dmu-real": f", {DMU_CODE_REPO}",
                "asrnn": f", {ASRNN_CODE_REPO}",
                "nnrnn": f", {NNRNN_CODE_REPO}",
                "cornn": f", {CORNN_CODE_REPO}",
                "lem": f", {LEM_CODE_REPO}",
            }.get(paper, "")
        )
        + ", file and line) or `ours` (why). Where the released code runs an experiment otherwise than the "
        "text, its code-protocol preset's value stands beside the text's, and the claims are judged under "
        "both (REPRODUCTION.md).",
        "",
    ]
    if paper == "dmu":
        lines += [
            "The real-data presets (NatLang, PolyMusic, translation, MNIST) have their page: [dmu-real.md](dmu-real.md).",
            "",
        ]
    if real:
        lines += [
            "DMU-C has no released script (experiments_repro/nat_lang.sh and poly_music.sh run DMU and RHN), "
            "so no code-protocol preset.",
            "",
        ]
    ours_count = {}
    for p in presets:
        if protocol(p) == "code":
            continue
        lines += _preset_table(p, code_of.get(p), ours_count)
    if real:
        lines += _gaps_table(DMU_REAL_CODE_GAPS, ("experiment", "the released code", "source", "rnnlab"))
        lines += _gaps_table(
            DMU_TRANSLATION_CODE_GAPS,
            ("experiment", "the released code", "source", "rnnlab"),
            "Translation: how the released runs differ",
            "No translation code-protocol preset: the released runs' data and decoder feeding cannot be set, "
            "so every way they differ from the presets is listed here, settable or not:",
        )
        lines += [_TABLE_IV, ""]
    if ours_count:
        lines += ["Settings of ours by preset: " + ", ".join(f"`{p}` {n}" for p, n in ours_count.items()) + ".", ""]
    if paper in ("cornn", "lem"):
        lines += _gaps_table([(what, src, ours) for p, what, src, ours in OSCILLATOR_CODE_GAPS if p == paper])
    if paper == "asrnn":
        lines += [
            "## What the released code does that no preset setting expresses",
            "",
            "| presets | the released code | source | why not in the code presets |",
            "|---|---|---|---|",
        ]
        lines += [
            "| " + " | ".join(c.replace("|", "\\|") for c in (p, what, str(src), why)) + " |"
            for p, what, src, why in ASRNN_CODE_UNMODELLED
        ]
        lines.append("")
    return "\n".join(lines)


FIDELITY_PAPERS = ("dmu", "dmu-real", "henaff", "asrnn", "nnrnn", "cornn", "lem")


def main(argv: list[str] | None = None) -> int:
    """``python -m rnnlab.ledger.sources [DIR]``: write the fidelity pages into DIR (default
    docs/fidelity)."""
    import sys
    from pathlib import Path

    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0] if argv else "docs/fidelity")
    out.mkdir(parents=True, exist_ok=True)
    for paper in FIDELITY_PAPERS:
        (out / f"{paper}.md").write_text(fidelity_page(paper), encoding="utf-8")
        print(f"wrote {out / f'{paper}.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
