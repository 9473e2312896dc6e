"""The papers' own code beside rnnlab's cells and ``nn.LSTM``, in one process, on one batch.

    python benchmarks/papers_code.py REPOS --json docs/papers-code.json   # the record (7 rounds)
    python benchmarks/papers_code.py REPOS --iters 2                      # a smoke run, no record
    python benchmarks/papers_code.py REPOS --models asrnn dmu --json out.json
    python benchmarks/papers_code.py docs/papers-code.json --table        # the table of a record

``REPOS`` is a directory holding the four reference repositories, cloned unchanged::

    REPOS/asRNN           https://github.com/ndminhkhoi46/asRNN          (0b27d67)
    REPOS/nnRNN_release   https://github.com/nnRNN/nnRNN_release         (294d4ff)
    REPOS/expRNN          https://github.com/lezcano/expRNN              (830ec83)
    REPOS/dmu             https://github.com/fuine/dmu                   (d4d7a8e)

(``--models`` limits the run to the repositories you have.) Their modules are imported with
import-time shims only, and never modified:

* ``torch.solve`` (removed from torch) as ``torch.linalg.solve`` (expRNN's Cayley map and
  Pade solve);
* a stub ``pandas`` module when pandas is not installed (asRNN's model module imports it for
  its training log only);
* nnRNN's ``OrthoRNNCell.reset_parameters`` as it was before the released version's
  regression (the release builds ``P`` from the uninitialised ``log_P`` and ignores the
  initialiser): ``log_P`` from the initialiser, ``P = expm(log_P)``, the input weight from
  the input initialiser.

**Each reference step is its copy script's step as the repository runs it** (their scripts
parse arguments and train at import, so the lines of the loop are restated here, keeping the
per-step work they do): the same model classes, forward loop, loss, optimisers and learning
rates, and

* asRNN (``copytask.py``): the batch one-hot into a kept buffer, gradient clipping at 10,
  ``loss.item()`` and ``model.correct(...).item()``;
* nnRNN (``copytask.py --onehot``): the one-hot of each step's input inside the time loop, the
  accuracy bookkeeping of the last K steps with ``.item()``, ``orthogonal_step`` and
  ``loss.item()``;
* expRNN (``1_copying.py``): the batch one-hot into a kept buffer and the accuracy under
  ``no_grad``;
* DMU: the repository has no copy task and trains through PyTorch Lightning; its ``DMULayer``
  (hidden layer 82, memory 82) with a linear readout, cross-entropy and RMSprop is timed.

What every step leaves out is written beside its row (:data:`REFERENCE_STEPS`): printing, file
writes (asRNN's checkpoint on a new best loss and its pickled log), Lightning's loop. Data
generation is left out for every model, rnnlab's included: one copy batch (L=1000, K=10,
T=1020, batch 128, 10 input symbols, 9 classes) is made once and fed to all. rnnlab's step is
what ``rnnlab train`` does per step: forward, loss, backward, the optimizer step, the
parametrization hook and ``loss.item()``, with asRNN's gradient clipping at 10 as in its
paper's script.

Sizes are the papers': asRNN n=138, expRNN n=190, nnRNN n=128, DMU 82; rnnlab's cells at the
same sizes, and ``nn.LSTM`` at the parameter count of expRNN n=190 (the speed benchmark's
match). Timing: one thread (``--threads``), the tuned allocator
(:func:`rnnlab.runtime.tune_malloc`), one warm-up step per model, then ``--iters`` rounds in
which every model does one training step, the order reversed every other round; each ratio
is the median [min-max] of its per-round ratios (at least 3 rounds for a record).

A record (``--json``) carries the CPU model, the BLAS and the load average before, during and
after the run (:mod:`rnnlab.bench.benchrecord`), and is refused on a busy machine (load average above
0.5 per core) unless ``--allow-load``, which marks it loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import types
from pathlib import Path

from rnnlab.bench import benchdocs, benchrecord

REPOS = {"asrnn": "asRNN", "nnrnn": "nnRNN_release", "exprnn": "expRNN", "dmu": "dmu"}
SIZES = {"asrnn": 138, "exprnn": 190, "nnrnn": 128, "dmu": 82}
L, K, N_IN, N_OUT = 1000, 10, 10, 9


class SetupError(Exception):
    """A missing repository or an import that failed (one line, with the fix)."""


@contextlib.contextmanager
def _repo_on_path(*paths: Path):
    """Import from ``paths``; afterwards forget the modules loaded from them, so the next
    repository's same-named modules (orthogonal, initialization, ...) load fresh. The
    objects already taken keep their own module globals."""
    roots = [str(p) for p in paths]
    sys.path[:0] = roots
    try:
        yield
    finally:
        del sys.path[: len(roots)]
        for name, mod in list(sys.modules.items()):
            f = getattr(mod, "__file__", None) or ""
            locs = list(getattr(getattr(mod, "__spec__", None), "submodule_search_locations", None) or [])
            if any(str(x).startswith(r) for r in roots for x in [f, *locs] if x):
                del sys.modules[name]


def _shim_torch_solve(torch) -> None:
    # torch.solve(B, A) returned (X, LU) with A X = B; today's torch keeps a stub that raises
    torch.solve = lambda B, A, out=None: (torch.linalg.solve(A, B), None)


def _require(root: Path, key: str) -> Path:
    path = root / REPOS[key]
    if not path.is_dir():
        raise SetupError(
            f"{path} not found: clone the reference repository for {key} there unchanged "
            f"(see the docstring), or leave {key} out with --models"
        )
    return path


def _copy_batch(torch, batch: int, seed: int = 0):
    """One copy-task batch: x (B, T, 10) one-hot, y (B, T) in [0, 9) (symbols 1-8, blank 0,
    marker 9 at step L + K, the K symbols to recall at the end)."""
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(1, 9, (batch, K), generator=g)
    idx = torch.cat(
        [
            seq,
            torch.zeros(batch, L, dtype=torch.long),
            torch.full((batch, 1), 9),
            torch.zeros(batch, K - 1, dtype=torch.long),
        ],
        1,
    )
    y = torch.cat([torch.zeros(batch, L + K, dtype=torch.long), seq], 1)
    x = torch.nn.functional.one_hot(idx, N_IN).float()
    return x, y


# --- the papers' code ---------------------------------------------------------------------


def papers_asrnn(torch, root: Path, x, y):
    repo = _require(root, "asrnn")
    nn = torch.nn
    stub = None
    try:
        import pandas  # noqa: F401
    except ImportError:
        stub = sys.modules["pandas"] = types.ModuleType("pandas")  # logging only
    try:
        with _repo_on_path(repo / "sources", repo / "sources" / "expRNN"):
            from custom_modules import asRNN
            from initialization import henaff_init_
            from model_loader import Model
            from trivializations import expm
    finally:
        if stub is not None:
            del sys.modules["pandas"]
    n = SIZES["asrnn"]
    torch.manual_seed(5544)
    args = argparse.Namespace(mode="dtriv", forget_bias=1, rho_rat_den=2, clip_norm=10)
    mode = ("dynamic", 100, 100)
    nonlinearity = asRNN(n, torch.zeros_like, mode, expm, 0.0, 0.0, 1e-5)
    model = Model(
        N_IN,
        n,
        N_OUT,
        nonlinearity,
        initializer_skew=henaff_init_,
        mode=mode,
        param=expm,
        args=args,
        embed_layer=None,
        batch_first=True,
    )
    model.lin.weight.data = nn.init.kaiming_normal_(model.lin.weight.data, nonlinearity="relu")
    model.lin.bias.data = torch.zeros_like(model.lin.bias.data)
    constrained = [p for name, p in model.named_parameters() if "recurrent_kernel" in name]
    free = [p for name, p in model.named_parameters() if "recurrent_kernel" not in name]
    opt = torch.optim.RMSprop([{"params": free}, {"params": constrained, "lr": 2e-5}], lr=2e-4, alpha=0.9)
    batch_x, yv = x.argmax(-1), y.reshape(-1)  # its data module's LongTensor batch
    x_onehot = torch.empty(x.shape)  # its kept one-hot buffer

    def step():
        x_onehot.zero_()  # its datamodule.onehot
        x_onehot.scatter_(2, batch_x.unsqueeze(2), 1)
        logits, _ = model(x_onehot, model.init_state(x.shape[0]))
        output = logits.view(-1, N_OUT)
        loss = model.loss(output, yv)
        model.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10)
        opt.step()
        loss.item()  # train_loss
        model.correct(output, yv).item()  # train_acc
        return loss

    return step


def papers_exprnn(torch, root: Path, x, y):
    repo = _require(root, "exprnn")
    nn = torch.nn
    with _repo_on_path(repo):
        from initialization import henaff_init_
        from orthogonal import OrthogonalRNN
        from parametrization import get_parameters
        from trivializations import expm
    n = SIZES["exprnn"]
    torch.manual_seed(5544)
    model = nn.ModuleDict(
        {
            "rnn": OrthogonalRNN(N_IN, n, initializer_skew=henaff_init_, mode=("dynamic", 100, 30), param=expm),
            "lin": nn.Linear(n, N_OUT),
        }
    )
    nn.init.kaiming_normal_(model.lin.weight.data, nonlinearity="relu")
    nn.init.constant_(model.lin.bias.data, 0)
    non_orth, log_orth = get_parameters(model)
    opt, opt_orth = torch.optim.RMSprop(non_orth, 2e-4), torch.optim.RMSprop(log_orth, lr=2e-5)
    batch_x = x.argmax(-1)
    x_onehot = torch.empty(x.shape)  # its kept one-hot buffer

    def step():
        x_onehot.zero_()  # its onehot()
        x_onehot.scatter_(2, batch_x.unsqueeze(2), 1)
        state = model.rnn.default_hidden(x_onehot[:, 0, ...])
        outs = []
        for inp in torch.unbind(x_onehot, dim=1):
            out, state = model.rnn(inp, state)
            outs.append(model.lin(out))
        logits = torch.stack(outs, dim=1)
        loss = nn.functional.cross_entropy(logits.view(-1, N_OUT), y.view(-1))
        opt.zero_grad()
        opt_orth.zero_grad()
        loss.backward()
        opt.step()
        opt_orth.step()
        with torch.no_grad():  # its model.accuracy
            torch.eq(torch.argmax(logits, dim=2), y).float().mean()
        return loss

    return step


def _nnrnn_reset_parameters(self):
    """OrthoRNNCell.reset_parameters before the release's regression (see the docstring)."""
    import torch

    self.i_initializer(self.U.weight.data)
    self.log_P.data = torch.as_tensor(self.r_initializer(self.hidden_size), dtype=torch.float32)
    self.P.data = self._B(False)


def papers_nnrnn(torch, root: Path, x, y):
    repo = _require(root, "nnrnn")
    nn = torch.nn
    with _repo_on_path(repo):
        import RNN_Cell
        from expRNN.initialization import henaff_init
    RNN_Cell.OrthoRNNCell.reset_parameters = _nnrnn_reset_parameters
    n = SIZES["nnrnn"]
    torch.manual_seed(5544)
    rnn = RNN_Cell.OrthoRNNCell(
        N_IN, n, "modrelu", bias=False, cuda=False, r_initializer=henaff_init, i_initializer=nn.init.xavier_normal_
    )
    lin = nn.Linear(n, N_OUT)
    nn.init.xavier_normal_(lin.weight)
    net = nn.ModuleDict({"rnn": rnn, "lin": lin})
    special = (rnn.log_P, rnn.P, rnn.UppT)
    opt = torch.optim.RMSprop(
        [
            {"params": [p for p in net.parameters() if all(p is not s for s in special)]},
            {"params": rnn.UppT, "weight_decay": 10e-6},
        ],
        lr=2e-4,
        alpha=0.99,
    )
    opt_orth = torch.optim.RMSprop([rnn.log_P], lr=2e-5, alpha=0.99)
    loss_func = nn.CrossEntropyLoss()
    # its batch: symbol indices as floats (T, B, 1) and targets (T, B, 1), time-major
    xs = x.argmax(-1).t().unsqueeze(2).float().contiguous()
    ys = y.t().unsqueeze(2).contiguous()

    def step():
        opt.zero_grad()
        opt_orth.zero_grad()
        hidden, loss, accuracy = None, 0, 0
        for i in range(len(xs)):  # its Model.forward
            inp = xs[i].new_zeros(xs[i].shape[0], N_IN).scatter_(1, xs[i].long(), 1)  # its onehot()
            hidden = rnn.forward(inp, hidden)
            out = lin(hidden)
            loss += loss_func(out, ys[i].squeeze(1))
            if i >= L + K:
                accuracy += (torch.argmax(out, dim=1) == ys[i].squeeze(1)).sum().item()
        accuracy /= K * xs.shape[1]
        loss /= xs.shape[0]
        loss += rnn.alpha_loss(1e-4)
        loss.backward()
        loss.item()  # its losses.append(loss_act.item())
        rnn.orthogonal_step(opt_orth)
        opt.step()
        return loss

    return step


def papers_dmu(torch, root: Path, x, y):
    repo = _require(root, "dmu")
    nn = torch.nn
    with _repo_on_path(repo):
        from deep_memory_update.layers.dmu import DMULayer
    n = SIZES["dmu"]
    torch.manual_seed(5544)
    layer = DMULayer(N_IN, [n, n])
    lin = nn.Linear(n, N_OUT)
    model = nn.ModuleDict({"rnn": layer, "lin": lin})
    opt = torch.optim.RMSprop(model.parameters(), lr=2e-4, alpha=0.9)
    yv = y.reshape(-1)

    def step():
        out, _ = layer(x)
        loss = nn.functional.cross_entropy(lin(out).reshape(-1, N_OUT), yv)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


PAPERS = {"asrnn": papers_asrnn, "exprnn": papers_exprnn, "nnrnn": papers_nnrnn, "dmu": papers_dmu}

#: what each timed reference step keeps and leaves out (written beside its row)
REFERENCE_STEPS = {
    "asrnn": "as `copytask.py`: one-hot into its buffer, model, loss, clipping at 10, RMSprop, `loss.item()`, "
    "`correct().item()`; left out: the print, the checkpoint on a new best loss and the pickled log "
    "(file writes)",
    "nnrnn": "as `copytask.py --onehot`: per-step one-hot, cell, readout, loss, alpha loss, `orthogonal_step`, "
    "RMSprop, accuracy with `.item()` over the last K steps, `loss.item()`; left out: the print",
    "exprnn": "as `1_copying.py`: one-hot into its buffer, OrthogonalRNN loop, readout, loss, both RMSprops, "
    "accuracy; left out: the print",
    "dmu": "its `DMULayer` with a linear readout, loss and RMSprop; not run: PyTorch Lightning's loop, metrics "
    "and logging, through which the repository trains (it has no copy task)",
}

#: gradient clipping of rnnlab's step, as the paper's script clips
CLIP = {"asrnn": 10.0}


# --- rnnlab and nn.LSTM -------------------------------------------------------------------


def rnnlab_step(torch, key: str, x, y):
    from rnnlab import parametrize as par
    from rnnlab.model import SequenceModel

    n = SIZES[key]
    options = {"layers": [n]} if key == "dmu" else {}
    torch.manual_seed(0)
    model = SequenceModel(key, N_IN, N_OUT, n, readout="all", cell_options=options)
    opt = torch.optim.RMSprop(model.parameters(), lr=2e-4, alpha=0.9)
    yv = y.reshape(-1)
    clip = CLIP.get(key)

    def step():
        logits = model(x)[0]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, N_OUT), yv)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        par.after_optimizer_step(model)
        loss.item()  # as `rnnlab train` logs every step
        return loss

    return step


def lstm_step(torch, x, y):
    from rnnlab.bench import speed

    cfg = speed.CONFIGS["copy"]
    n = speed.match_hidden("nn.LSTM", {}, cfg, speed._count("exprnn", {}, cfg, SIZES["exprnn"]))
    torch.manual_seed(0)
    lstm, lin = torch.nn.LSTM(N_IN, n), torch.nn.Linear(n, N_OUT)
    params = [*lstm.parameters(), *lin.parameters()]
    opt = torch.optim.RMSprop(params, lr=2e-4, alpha=0.9)
    xt, yv = x.transpose(0, 1).contiguous(), y.t().reshape(-1)

    def step():
        loss = torch.nn.functional.cross_entropy(lin(lstm(xt)[0]).reshape(-1, N_OUT), yv)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
        return loss

    return step, n


# --- timing and the record ----------------------------------------------------------------


def measure(steps: dict, iters: int, log=print, host: dict | None = None) -> dict:
    """Per-round wall seconds of each named step function: a warm-up step each, then
    ``iters`` rounds in which every step runs once, the order reversed every other round (the
    load average is sampled into ``host`` after each round)."""
    for name, fn in steps.items():  # warm-up
        loss = float(fn().detach())
        if loss != loss:
            raise SetupError(f"{name} gave a NaN loss in its first step")
    names = list(steps)
    times = {name: [] for name in names}
    for r in range(iters):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
        if host is not None:
            benchrecord.sample(host)
        log(f"round {r + 1}/{iters}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items()))
    return times


def _prepare(a) -> tuple[dict, dict]:
    """The allocator, threads, shims, the batch and every step function; (steps, facts)."""
    from rnnlab import runtime

    malloc = runtime.tune_malloc()
    import torch

    torch.set_num_threads(a.threads)
    _shim_torch_solve(torch)
    x, y = _copy_batch(torch, a.batch)
    steps = {}
    for m in a.models:
        steps[f"{m} papers"] = PAPERS[m](torch, a.repos, x, y)
        steps[f"{m} rnnlab"] = rnnlab_step(torch, m, x, y)
    lstm, n_lstm = lstm_step(torch, x, y)
    steps[f"nn.LSTM (n={n_lstm})"] = lstm
    return steps, {"torch": torch.__version__, "malloc": "tuned" if malloc else "default"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("repos", type=Path, help="directory holding asRNN/, nnRNN_release/, expRNN/ and dmu/")
    p.add_argument("--models", nargs="+", default=list(REPOS), choices=list(REPOS))
    p.add_argument("--iters", type=int, default=7, help="timed rounds (at least 3 for a record; default 7)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--json", type=Path, help="also write the record here (refused on a busy machine)")
    p.add_argument("--note", default="", help="added to the recorded conditions (e.g. the repositories' commits)")
    p.add_argument(
        "--table", action="store_true", help="print the table of a recorded JSON (REPOS is then that file) and exit"
    )
    benchrecord.add_arguments(p)
    a = p.parse_args(argv)
    if a.table:
        print(render(json.loads(Path(a.repos).read_text()), str(a.repos)))
        return 0
    if a.iters < (3 if a.json else 1):
        p.error(f"--iters must be at least {3 if a.json else 1}{' for a record' if a.json else ''}, got {a.iters}")

    def body():  # the checks come before anything changes this process (allocator, threads)
        for m in a.models:
            _require(a.repos, m)
        host = benchrecord.start(a.allow_load or not a.json, own=a.threads)
        steps, facts = _prepare(a)
        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        text = (
            f"copy L={L}, K={K}, batch {a.batch}, threads={a.threads}, torch {facts['torch']}, "
            f"allocator {facts['malloc']}, {a.iters} alternating rounds, {date}"
        )
        text += f"; {a.note}" if a.note else ""
        print(text, flush=True)
        rounds = measure(steps, a.iters, log=lambda s: print(s, flush=True), host=host)
        cond = benchrecord.conditions(
            host, text=text, date=date, threads=a.threads, batch=a.batch, rounds=a.iters, **facts
        )
        rec = {
            "conditions": cond,
            "sizes": {m: SIZES[m] for m in a.models},
            "reference_steps": {m: REFERENCE_STEPS[m] for m in a.models},
            "rounds_s": rounds,
            "median_s": {k: statistics.median(v) for k, v in rounds.items()},
        }
        benchrecord.publish(rec, a.json, "\n" + render(rec, str(a.json or "(not written)")))

    return benchrecord.exit_code(body, SetupError)


def render(rec: dict, source: str) -> str:
    """The captioned table of a record, as BENCHMARKS.md shows it (:mod:`rnnlab.bench.benchdocs`)."""
    return benchdocs.VIEWS["papers"](rec, source)


if __name__ == "__main__":
    sys.exit(main())
