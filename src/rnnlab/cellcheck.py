"""``rnnlab check-cell``: a cell against the contract of docs/own-cell.md, one line per item.

Each item is judged against something computed another way: the cell's ``sequence`` against a
step loop written here, a sequence with lengths against each example run alone to its own
length, autograd against finite differences in float64, an ensemble member against its single
run, a resumed run against the uninterrupted one, a reloaded run against its recorded scores.
An item that raises fails with the exception's first line; the items after it still run.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

#: sizes of the float64 checks: input width, hidden width, batch, time steps
SIZES = {"I": 3, "H": 6, "B": 4, "T": 6}
#: the float64 tolerance of a path against the step loop
ATOL64 = 1e-10
#: a float64 ensemble member against its single run over :data:`RUN_STEPS` steps (weights,
#: relative to max(1, |w|); docs/ensembles.md: in float32 batched and single products round
#: differently, and RMSprop turns a rounding in a near-zero gradient into a full step)
ENSEMBLE_RTOL = 1e-9
#: the batch of the gradcheck item: odd, and more rows than a kernel's block of 2 or 4
GRADCHECK_BATCH = 5
#: training steps of the run items (an evaluation every 2)
RUN_STEPS = 4


@dataclass
class Item:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name:16s} {self.detail}"


def _leaves(state) -> list:
    return [state] if not isinstance(state, (tuple, list)) else list(state)


def _maxdiff(a, b) -> float:
    diffs = [float((x - y).detach().abs().max()) if x.numel() else 0.0 for x, y in zip(_leaves(a), _leaves(b))]
    if len(_leaves(a)) != len(_leaves(b)):
        return float("inf")
    return max(diffs, default=0.0) if all(torch.isfinite(torch.tensor(diffs))) else float("inf")


def _step_loop(cell, x, state):
    """The recurrence written out here, from ``state``: ``forward`` step by step."""
    outs = []
    for t in range(x.shape[0]):
        h, state = cell.forward(x[t], state)
        outs.append(h)
    return torch.stack(outs), state


class _Checker:
    def __init__(self, spec: str, options: dict | None = None):
        self.spec, self.options = spec, dict(options or {})
        self.cls = None
        self.items: list[Item] = []

    def item(self, name: str, fn: Callable[[], str]) -> Item:
        try:
            it = Item(name, True, fn())
        except AssertionError as e:
            it = Item(name, False, str(e))
        except Exception as e:  # noqa: BLE001 - any error of the cell is a failed item, reported in one line
            where = traceback.extract_tb(e.__traceback__)[-1]
            first = str(e).splitlines()[0] if str(e) else ""
            it = Item(name, False, f"{type(e).__name__}: {first} ({Path(where.filename).name}:{where.lineno})")
        self.items.append(it)
        return it

    def cell(self, dtype=None, seed: int = 0):
        torch.manual_seed(seed)
        c = self.cls(SIZES["I"], SIZES["H"], **self.options)
        return c.to(dtype or torch.float64)

    def data(self, seed: int = 1):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(SIZES["T"], SIZES["B"], SIZES["I"], generator=g, dtype=torch.float64)

    # --- the items ------------------------------------------------------------------------
    def build(self) -> str:
        from .cells import CELLS

        self.cls = CELLS.resolve(self.spec)
        a, b = self.cell(), self.cell()
        n = sum(p.numel() for p in a.parameters())
        assert n > 0, f"{self.cls.__name__} has no parameters"
        for (k, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p, q), (
                f"two builds under one seed differ in {k}: the initialisation must use torch's RNG"
            )
        return f"{self.cls.__module__}.{self.cls.__name__}: {n} parameters at I={SIZES['I']}, H={SIZES['H']}; seeded builds equal"

    def state(self) -> str:
        cell, x, B, H = self.cell(), self.data(), SIZES["B"], SIZES["H"]
        s0 = cell.init_state(B, dtype=torch.float64)
        for i, leaf in enumerate(_leaves(s0)):
            assert tuple(leaf.shape) == (B, H), (
                f"init_state({B}) leaf {i} has shape {tuple(leaf.shape)}, expected ({B}, {H}) "
                f"(one (B, H) tensor, or a tuple of them)"
            )
        h, s1 = cell.forward(x[0], s0)
        assert tuple(h.shape) == (B, H), f"forward returned an output of shape {tuple(h.shape)}, expected ({B}, {H})"
        assert type(s1) is type(s0) or (isinstance(s0, (tuple, list)) and isinstance(s1, (tuple, list))), (
            f"forward returned a state of type {type(s1).__name__}, init_state one of {type(s0).__name__}"
        )
        assert [tuple(s.shape) for s in _leaves(s1)] == [tuple(s.shape) for s in _leaves(s0)], (
            f"forward returned state shapes {[tuple(s.shape) for s in _leaves(s1)]}, init_state gave "
            f"{[tuple(s.shape) for s in _leaves(s0)]}"
        )
        kind = "one tensor" if len(_leaves(s0)) == 1 else f"a tuple of {len(_leaves(s0))} tensors"
        return f"init_state and forward: output ({B}, {H}), state {kind} of ({B}, {H})"

    def deterministic(self) -> str:
        cell, x = self.cell(), self.data()
        a, sa = _step_loop(cell, x, cell.init_state(SIZES["B"], dtype=torch.float64))
        b, sb = _step_loop(cell, x, cell.init_state(SIZES["B"], dtype=torch.float64))
        d = _maxdiff(a, b)
        assert d == 0, f"two runs of the same steps on the same input differ by {d:.3g}: the step is not deterministic"
        c, _ = cell.sequence(x)
        e, _ = cell.sequence(x)
        d = _maxdiff(c, e)
        assert d == 0, f"two calls of sequence() on the same input differ by {d:.3g}: not deterministic"
        return "the same input gives bit-equal outputs (step loop and sequence)"

    def reference(self) -> str:
        from .cells import unroll

        cell, x = self.cell(), self.data()
        ref, sref = _step_loop(cell, x, cell.init_state(SIZES["B"], dtype=x.dtype))
        out, st = cell.sequence(x)
        un, sun = unroll(cell, x)
        d = max(_maxdiff(out, ref), _maxdiff(st, sref), _maxdiff(un, ref))
        assert d <= ATOL64, f"sequence()/unroll() differ from the step loop by {d:.3g} in float64 (tolerance {ATOL64})"
        gref = self._grads(cell, lambda: _step_loop(cell, x, cell.init_state(SIZES["B"], dtype=x.dtype)))
        gseq = self._grads(cell, lambda: cell.sequence(x))
        dg = max((float((a - b).abs().max()) for a, b in zip(gseq, gref)), default=0.0)
        assert dg <= ATOL64, f"the gradients of sequence() differ from the step loop's by {dg:.3g} in float64"
        return (
            f"sequence() and unroll() equal the step loop in float64, forward and gradients (max diff {max(d, dg):.1e})"
        )

    @staticmethod
    def _grads(cell, run):
        out, state = run()
        loss = out.sin().sum() + sum(s.cos().sum() for s in _leaves(state))
        params = [p for p in cell.parameters() if p.requires_grad]
        return torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)

    def lengths(self) -> str:
        cell, x, T, B = self.cell(), self.data(), SIZES["T"], SIZES["B"]
        lengths = torch.tensor([T, 1, T - 2, 3][:B])
        out, state = cell.sequence(x, None, lengths)
        worst = 0.0
        for b in range(B):
            L = int(lengths[b])
            ref, sref = _step_loop(cell, x[:L, b : b + 1], cell.init_state(1, dtype=x.dtype))
            worst = max(worst, _maxdiff(out[:L, b : b + 1], ref))
            worst = max(worst, _maxdiff([s[b : b + 1] for s in _leaves(state)], _leaves(sref)))
            if L < T:
                assert float(out[L:, b].detach().abs().max()) == 0, (
                    f"outputs past length {L} of example {b} are not zero"
                )
        assert worst <= ATOL64, (
            f"a sequence with lengths differs by {worst:.3g} from each example run to its own length"
        )
        return f"lengths {lengths.tolist()}: each example equals its own run to its length, zeros after (max diff {worst:.1e})"

    def h0(self) -> str:
        cell, x = self.cell(), self.data()
        g = torch.Generator().manual_seed(2)
        zeros = cell.init_state(SIZES["B"], dtype=x.dtype)
        leaves = [torch.randn(leaf.shape, generator=g, dtype=x.dtype) for leaf in _leaves(zeros)]
        h0 = tuple(leaves) if isinstance(zeros, (tuple, list)) else leaves[0]
        ref, sref = _step_loop(cell, x, h0)
        out, st = cell.sequence(x, h0)
        d = max(_maxdiff(out, ref), _maxdiff(st, sref))
        assert d <= ATOL64, f"sequence(x, h0) differs from the step loop from h0 by {d:.3g}"
        zero, _ = cell.sequence(x)
        moved = _maxdiff(out[:1], zero[:1])
        assert moved > 0, "the first output is the same from h0 as from zeros: the step ignores its state"
        return f"a given h0 is where the recurrence starts (max diff {d:.1e}) and changes the first output"

    def gradcheck(self) -> str:
        from torch.func import functional_call

        torch.manual_seed(0)
        cell = self.cls(2, 4, **self.options).to(torch.float64)
        names = [n for n, p in cell.named_parameters() if p.requires_grad]
        params = tuple(dict(cell.named_parameters())[n].detach().clone().requires_grad_() for n in names)
        g = torch.Generator().manual_seed(3)
        # every row of a batch of GRADCHECK_BATCH: a backward may be wrong only past a kernel's
        # block of rows, or only for odd rows, which a batch of one or two never shows
        B = GRADCHECK_BATCH
        x = torch.randn(3, B, 2, generator=g, dtype=torch.float64, requires_grad=True)
        leaves = [torch.randn(s.shape, generator=g, dtype=torch.float64) for s in _leaves(cell.init_state(B))]
        tuple_state = isinstance(cell.init_state(B), (tuple, list))
        h0 = tuple(leaf.requires_grad_() for leaf in leaves)
        wrapper = _Sequence(cell)

        def f(x, *rest):
            ps, hs = rest[: len(params)], rest[len(params) :]
            state = tuple(hs) if tuple_state else hs[0]
            out, st = functional_call(wrapper, {f"cell.{n}": p for n, p in zip(names, ps)}, (x, state))
            return (out, *_leaves(st))

        ok = torch.autograd.gradcheck(f, (x, *params, *h0), eps=1e-6, atol=1e-5, rtol=1e-4, raise_exception=False)
        assert ok, (
            "torch.autograd.gradcheck fails in float64: the gradient of the cell's sequence differs from "
            "finite differences (a custom backward or a non-differentiable step)"
        )
        return (
            f"autograd equals finite differences in float64 for the input, h0 and all {len(params)} parameter "
            f"tensors, every one of {B} batch rows"
        )

    def _run_config(self, extra: list[str] = ()):
        from . import config

        opts = [f"model.cell_options.{k}={config.toml_value(v)}" for k, v in self.options.items()]
        return config.load(
            "demo/lstm",
            [
                f"model.cell={self.spec}",
                "model.cell_options={}",
                *opts,
                "model.hidden_size=6",
                "model.embedding=4",
                "task.L=4",
                "task.val_size=16",
                "task.test_size=16",
                "train.batch_size=8",
                f"train.steps={RUN_STEPS}",
                "train.eval_every=2",
                "train.log_every=1",
                "train.device=cpu",
                *extra,
            ],
        )

    def runs(self, root: Path) -> None:
        """The items that train: an ensemble member against its single run, save/load, resume."""
        from .train import train

        cfg = self._run_config()
        single = {}

        def singles() -> str:
            with _silent():
                for s in (0, 1):
                    single[s] = train(_seed(cfg, s), root / f"single{s}", progress=False)
            return "ok"

        built = self.item("single run", lambda: _trained(singles(), single, root))
        if not built.ok:
            for name in ("ensemble", "save/load", "resume"):
                self.items.append(Item(name, False, "not run: the single run failed"))
            return
        self.item("ensemble", lambda: self.ensemble(cfg, root))
        self.item("save/load", lambda: self.save_load(cfg, root, single[0]))
        self.item("resume", lambda: self.resume(cfg, root))

    def ensemble(self, cfg, root: Path) -> str:
        from .ensemble import train_ensemble
        from .train import train

        with _silent(), _float64_models():
            for s in (0, 1):
                train(_seed(cfg, s), root / f"single64-{s}", progress=False)
            train_ensemble(cfg, [0, 1], root / "ensemble", progress=False)
        worst = 0.0
        for s in (0, 1):
            a = _weights(root / f"single64-{s}")
            b = _weights(root / "ensemble" / f"seed{s}")
            assert a.keys() == b.keys(), (
                f"member {s} saved other weights than its single run: {sorted(set(a) ^ set(b))}"
            )
            for k in a:
                scale = max(float(a[k].abs().max()), 1.0)
                worst = max(worst, float((a[k] - b[k]).abs().max()) / scale)
        assert worst <= ENSEMBLE_RTOL, (
            f"after {RUN_STEPS} steps in float64 an ensemble member's weights differ from its single run's by "
            f"{worst:.3g} (tolerance {ENSEMBLE_RTOL}): the step does not compute the same under torch.func.vmap"
        )
        return (
            f"2 members trained as one batched model equal their single runs after {RUN_STEPS} steps in float64 "
            f"(max diff {worst:.1e})"
        )

    def save_load(self, cfg, root: Path, result: dict) -> str:
        from .rundir import load_run
        from .train import evaluate

        rcfg, task, model = load_run(root / "single0", which="last")
        got = evaluate(model, task, "val", rcfg.train.eval_batch_size, rcfg.train.eval_max_batches)
        want = result["final"]
        worst = max(abs(got[k] - want[k]) / max(abs(want[k]), 1e-12) for k in want if k in got)
        assert worst <= 1e-6, f"the reloaded run scores {got} on validation, the run recorded {want}"
        return f"the run rebuilt from config.json + checkpoint.pt scores what it recorded (rel. diff {worst:.1e})"

    def resume(self, cfg, root: Path) -> str:
        from .train import train

        half = _seed(cfg, 0, [f"train.steps={RUN_STEPS // 2}"])
        with _silent():
            train(half, root / "resumed", progress=False)
            train(_seed(cfg, 0), root / "resumed", resume=True, progress=False)
        a, b = _weights(root / "single0"), _weights(root / "resumed")
        diff = [k for k in a if not torch.equal(a[k], b[k])]
        assert not diff, f"a run stopped at step {RUN_STEPS // 2} and resumed ends with other weights ({diff[:3]})"
        return f"stopped at step {RUN_STEPS // 2} and resumed: bit-equal to the uninterrupted run at step {RUN_STEPS}"


class _Sequence(nn.Module):
    """A module whose forward is ``cell.sequence`` (``functional_call`` swaps its parameters)."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, state):
        return self.cell.sequence(x, state)


def _seed(cfg, seed: int, extra: list[str] = ()):
    from . import config

    data = config.apply_overrides(cfg.to_dict(), [f"train.seed={seed}", *extra])
    return config.from_dict(data)


def _trained(_: str, single: dict, root: Path) -> str:
    r = single[0]
    return f"{RUN_STEPS} steps of the copy task trained and recorded (val/loss {r['final'].get('val/loss', float('nan')):.4g})"


def _weights(run_dir: Path) -> dict:
    """The weights of a run's last checkpoint."""
    from .rundir import RunFiles

    ck = torch.load(RunFiles(run_dir).checkpoint, map_location="cpu", weights_only=False)
    return ck["model"] if "model" in ck else ck


@contextlib.contextmanager
def _float64_models():
    """The trainer builds its models (single runs and ensemble members alike) in float64."""
    from . import train as T

    build = T.build_model
    T.build_model = lambda m, t: build(m, t).double()
    try:
        yield
    finally:
        T.build_model = build


@contextlib.contextmanager
def _silent():
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def check_cell(spec: str, options: dict | None = None, runs: bool = True, log=print) -> list[Item]:
    """Check the cell ``spec`` (a cell key, ``"package.module:Class"``, ``"file.py:Class"`` or
    an entry point) built with ``options``; log one line per item and return the items.
    ``runs=False`` leaves out the items that train (ensemble, save/load, resume)."""
    from .runtime import caller_state_kept

    ck = _Checker(spec, options)
    with caller_state_kept():
        torch.set_num_threads(1)
        first = ck.item("build", ck.build)
        log(first.line())
        if not first.ok:
            return ck.items
        for name, fn in (
            ("state", ck.state),
            ("deterministic", ck.deterministic),
            ("reference loop", ck.reference),
            ("lengths", ck.lengths),
            ("h0", ck.h0),
            ("gradcheck", ck.gradcheck),
        ):
            log(ck.item(name, fn).line())
        if runs:
            n = len(ck.items)
            with tempfile.TemporaryDirectory(prefix="rnnlab-check-cell-") as tmp:
                ck.runs(Path(tmp))
            for it in ck.items[n:]:
                log(it.line())
    return ck.items


def main_check_cell(spec: str, options: list[str], runs: bool = True, as_json: bool = False) -> int:
    """``rnnlab check-cell``: exit 0 when every item passes, 1 otherwise."""
    from .config import parse_override

    opts = {}
    for item in options or []:
        path, value = parse_override(item)
        opts[".".join(path)] = value
    items = check_cell(spec, opts, runs=runs, log=(lambda _: None) if as_json else print)
    failed = [it for it in items if not it.ok]
    if as_json:
        print(json.dumps([it.__dict__ for it in items], indent=2))
    else:
        print(
            f"{len(items) - len(failed)} of {len(items)} passed"
            + (f"; failed: {', '.join(it.name for it in failed)}" if failed else "")
        )
    return 1 if failed else 0
