"""CPU time per training step of the one training loop: a single run (a group of one) and an
ensemble of E members, one thread, the median of the measured steps.

    python benchmarks/group_step.py                       # dmu/adding-dmu, batch 32, E = 1 and 8
    python benchmarks/group_step.py --preset dmu/adding-rnn --sizes 1 8 51 --steps 40

Each size runs in a fresh process (``--one E``), so that sizes do not share caches or warm-up;
to compare two versions of the code, run this file with each version's ``src`` first on
PYTHONPATH, alternating (the median of several alternations). A version before the one loop
(``rnnlab.train.train_step``) is timed through its ``train_step``, the step it took then.
Times are ``time.thread_time`` (CPU time of the training thread), which a loaded machine
disturbs less than wall time.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one(preset: str, size: int, batch: int, steps: int, warmup: int = 3) -> float:
    """Median seconds per training step of a fresh group of ``size`` members."""
    import torch

    torch.set_num_threads(1)
    from rnnlab import config
    from rnnlab import train as T
    from rnnlab.ensemble import started
    from rnnlab.tasks import build_task

    cfg = config.load(preset, [f"train.batch_size={batch}", "train.threads=1"])
    task = build_task(cfg.task)

    def timed(step) -> float:
        for _ in range(warmup):
            step()
        times = []
        for _ in range(steps):
            t = time.thread_time()
            step()
            times.append(time.thread_time() - t)
        return statistics.median(times)

    with tempfile.TemporaryDirectory() as tmp:
        if size == 1 and not hasattr(T, "Group"):  # a version before the one loop
            from rnnlab.rundir import RunFiles, claim

            class NoBar:
                def set_postfix(self, **_):
                    pass

            root = Path(tmp) / "single"
            with claim(root):
                run, tr = T.prepare(cfg, RunFiles(root), False, None, task, torch.device("cpu"))
                T.open_log(run, False)
                try:
                    return timed(lambda: T.log_step(run, tr, T.train_step(run, tr), NoBar()))
                finally:
                    T.close_run(run)
        kind = {} if size > 1 else {"batched": False}
        with started(cfg, range(size), Path(tmp), task, **kind) as group:
            ms = list(group.members)
            return timed(lambda: group.step(ms))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="dmu/adding-dmu")
    p.add_argument("--sizes", nargs="+", type=int, default=[1, 8])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process: one size
    a = p.parse_args(argv)
    if a.one is not None:
        print(json.dumps({"E": a.one, "s": one(a.preset, a.one, a.batch, a.steps)}))
        return 0
    for size in a.sizes:
        cmd = [sys.executable, __file__, "--preset", a.preset, "--batch", str(a.batch), "--steps", str(a.steps)]
        out = subprocess.run([*cmd, "--one", str(size)], capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{a.preset} E={size}: {1e3 * r['s']:.2f} ms per training step ({1e3 * r['s'] / size:.2f} ms a member)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
