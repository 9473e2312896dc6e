"""Backends: the run lock, the local pool, and Ray (a real local instance / head node on 127.0.0.1)."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import kill_driver_and_check_its_workers_die, tiny_job, wait_until
from rnnlab.backends import job_for, run_jobs, run_one
from rnnlab.cli import main

SRC = str(Path(__file__).parents[2] / "src")


TINY = tiny_job()


def write_suite(path: Path, steps: int = 10, seeds=(1, 2), presets=("demo/lstm", "demo/rnn")) -> Path:
    sets = tiny_job(steps=steps)
    path.write_text(
        f'name = "tiny"\npresets = {json.dumps(list(presets))}\nseeds = {json.dumps(list(seeds))}\n'
        f'set = {json.dumps(sets)}\nmetrics = ["test/loss"]\n'
    )
    return path


def events(run_dir: Path) -> list[dict]:
    p = run_dir / "attempts.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def results(root: Path) -> dict:
    return {
        str(p.parent.relative_to(root)): {
            k: v for k, v in json.loads(p.read_text()).items() if k in ("final", "test", "steps", "best")
        }
        for p in sorted(root.rglob("result.json"))
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_head(env: dict) -> tuple[subprocess.Popen, int]:
    """`ray start --head` on 127.0.0.1 (its own session and temp dir); returns once its GCS port
    accepts connections."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    port = free_port()
    temp = tempfile.mkdtemp(prefix="rnnray", dir="/tmp")  # Ray's socket paths must stay short
    head = subprocess.Popen(
        [
            ray_bin,
            "start",
            "--head",
            "--block",
            "--node-ip-address",
            "127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            f"--temp-dir={temp}",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    t0 = time.time()
    while time.time() - t0 < 120:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return head, port
        except OSError:
            time.sleep(0.5)
    stop_head(head)
    raise AssertionError("the Ray head did not start within 120 s")


def stop_head(head: subprocess.Popen) -> None:
    os.killpg(head.pid, signal.SIGTERM)
    try:
        head.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return {
        **env,
        "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "RAY_USAGE_STATS_ENABLED": "0",
        **extra,
    }


# about 20 s idle (the refused driver gives up after Ray's 2 connection tries instead of 20). Ray >= 2.5x turns token authentication on in `ray start --head` whenever the
# head holds a token (~/.ray/auth_token is written by the first local instance), while
# ray.init(address=...) never does: before the fix every --address driver was refused.
def test_ray_head_with_token_authentication(tmp_path):
    """A head started with token authentication: a driver holding the token (RAY_AUTH_MODE unset)
    runs the suite through --address; a driver with another token gets a one-line error that says
    how to fix it, and no run starts."""
    pytest.importorskip("ray")
    import secrets

    good, bad = secrets.token_hex(32), secrets.token_hex(32)
    suite = write_suite(tmp_path / "s.toml", seeds=(1,), presets=("demo/rnn",))
    head, port = start_head(clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=good))
    driver = [
        sys.executable,
        "-m",
        "rnnlab.cli",
        "suite",
        str(suite),
        "--backend",
        "ray",
        "--address",
        f"127.0.0.1:{port}",
    ]
    try:
        refused = subprocess.run(
            driver + ["--runs-dir", str(tmp_path / "bad")],
            env=clean_env(RAY_AUTH_TOKEN=bad, RAY_NUM_REDIS_GET_RETRIES="2"),
            capture_output=True,
            text=True,
            timeout=300,
        )
        ok = subprocess.run(
            driver + ["--runs-dir", str(tmp_path / "ray")],
            env=clean_env(RAY_AUTH_TOKEN=good),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        stop_head(head)
    assert refused.returncode == 2, refused.stderr[-2000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("rnnlab: error:") and "ray get-auth-token" in last and f"127.0.0.1:{port}" in last
    assert "Traceback" not in refused.stderr and not list((tmp_path / "bad").rglob("result.json"))
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert main(["suite", str(suite), "--runs-dir", str(tmp_path / "local")]) == 0
    assert results(tmp_path / "ray") == results(tmp_path / "local") and len(results(tmp_path / "ray")) == 1


def test_a_busy_run_is_reported_or_waited_for(tmp_path):
    """Another process holds the run's lock: run_one reports it busy at once, or with a wait
    (what a Ray task of a restarted driver does) trains it as soon as the holder lets go."""
    d = tmp_path / "run"
    code = (
        f"import sys, time; sys.path.insert(0, {SRC!r}); from rnnlab.rundir import claim\n"
        f"with claim({str(d)!r}):\n    print('held', flush=True); time.sleep(float(sys.stdin.readline()))"
    )
    job = job_for("demo/lstm", TINY, d)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        status, err = run_one(job)
        assert status == "busy" and f"pid {p.pid}" in err
        assert not (d / "config.json").exists()
        p.stdin.write("1.5\n")
        p.stdin.flush()
        t0 = time.time()
        assert run_one(job, wait=60) == ("trained", "")
        assert time.time() - t0 >= 1.0  # it waited for the holder
    finally:
        p.kill()
        p.communicate()  # reaps it and closes its pipes
    assert [e["event"] for e in events(d)] == ["start", "end"]


def test_local_backend_reports_a_failed_run_and_finishes_the_others(tmp_path):
    good = [job_for("demo/lstm", TINY + [f"train.seed={s}"], tmp_path / f"lstm{s}") for s in (1, 2)]
    # a real-data run with an empty data directory fails inside the worker (no files)
    bad = job_for("asrnn/psmnist-n122-lstm", ["train.steps=2"], tmp_path / "psmnist", data_dir=str(tmp_path / "nodata"))
    lines = []
    out = run_jobs([good[0], bad, good[1]], "local", parallel=2, log=lines.append)
    status = {Path(j.run_dir).name: (s, e) for j, s, e in out}
    assert status["lstm1"][0] == status["lstm2"][0] == "trained"
    assert status["psmnist"][0] == "failed" and "not found" in status["psmnist"][1]
    assert "\n" not in status["psmnist"][1]
    assert any("[failed]" in ln and "psmnist" in ln for ln in lines)
    assert not (tmp_path / "psmnist").exists()  # a start that failed before writing anything leaves no stub
    # a second pass skips what is finished (no new attempt) and tries the failed run again
    out2 = run_jobs([good[0], bad, good[1]], "local", parallel=1, log=lines.append)
    assert sorted(s for _, s, _ in out2) == ["done", "done", "failed"]
    assert [e["event"] for e in events(tmp_path / "lstm1")] == ["start", "end"]


def _lock_pid(run_dir: Path) -> int | None:
    try:
        return int(json.loads((run_dir / ".lock").read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def test_a_killed_pool_worker_fails_only_its_own_run(tmp_path):
    """SIGKILL of the pool worker that trains one run (as the kernel's out-of-memory killer would):
    that run is reported failed with the signal, the queued runs still train, and the next pass
    resumes it. Before, the pool broke (BrokenProcessPool) and every run not yet finished was
    reported failed with it."""
    victim = job_for("demo/lstm", tiny_job(steps=120), tmp_path / "victim")
    others = [job_for("demo/lstm", TINY + [f"train.seed={s}"], tmp_path / f"run{s}") for s in (1, 2)]
    killed = []

    def killer() -> None:
        if wait_until(lambda: _lock_pid(tmp_path / "victim") and (tmp_path / "victim" / "checkpoint.pt").exists()):
            pid = _lock_pid(tmp_path / "victim")
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    import threading

    t = threading.Thread(target=killer)
    t.start()
    lines = []
    out = run_jobs([victim, *others], "local", parallel=2, log=lines.append)
    t.join()
    assert killed and killed[0] != os.getpid()
    status = {Path(j.run_dir).name: (s, e) for j, s, e in out}
    assert status["victim"][0] == "failed" and "killed by SIGKILL" in status["victim"][1], status
    assert [status[f"run{s}"][0] for s in (1, 2)] == ["trained"] * 2, status
    assert not any("BrokenProcessPool" in ln for ln in lines)
    # the run itself is intact: a second pass resumes it from its checkpoint and finishes it
    assert run_one(victim) == ("resumed", "")
    assert [e["event"] for e in events(tmp_path / "victim")] == ["start", "start", "end"]
    assert json.loads((tmp_path / "victim" / "result.json").read_text())["steps"] == 120


def _train_steps(run_dir: Path) -> list[int]:
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    return [r["step"] for r in rows if "train/loss" in r]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the workers")
def test_ctrl_c_cancels_queued_runs_and_stops_running_ones_at_their_next_checkpoint(tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group) during `rnnlab suite --jobs 2`: the queued
    runs never start, the two running ones train on to their next checkpoint and stop there, the
    driver exits 130 saying to rerun the same command, and the rerun finishes every run with each
    step trained once. Before, the pool kept training the queued runs for about a minute and the
    message said `rnnlab train ... --resume`."""
    every, steps = 40, 1000  # long enough that no run can finish before the second one has started
    suite = tmp_path / "s.toml"
    sets = tiny_job("train.log_every=1", steps=steps, eval_every=every)
    suite.write_text(f'name = "c"\npresets = ["demo/lstm"]\nseeds = [1, 2, 3]\nset = {json.dumps(sets)}\n')
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "rnnlab.cli", "suite", str(suite), "--runs-dir", str(runs), "--jobs", "2"]
    driver = subprocess.Popen(
        argv, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        running = lambda: [d for d in runs.glob("c/*/seed*") if (d / "metrics.jsonl").exists()]  # noqa: E731
        assert wait_until(lambda: len(running()) >= 2 and all(_train_steps(d) for d in running()))
        at_interrupt = {d: max(_train_steps(d)) for d in running()}
        os.killpg(driver.pid, signal.SIGINT)
        _, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == 130, err
    assert "rerun the same command to continue" in err and "--resume" not in err, err
    assert err.count("[cancelled]") == 1 and err.count("[interrupted]") == 2, err
    assert sorted(p.name for p in runs.glob("c/*/seed*")) == sorted(d.name for d in at_interrupt)  # queued: untouched
    import torch

    for d, step in at_interrupt.items():
        assert not (d / "result.json").exists() and not (d / ".lock").exists()
        ckpt = torch.load(d / "checkpoint.pt", weights_only=False)["progress"]["step"]
        assert ckpt % every == 0 and ckpt >= step, (d, ckpt, step)  # its next checkpoint, not the last one
        assert [(e["event"], e.get("status")) for e in events(d)] == [("start", None), ("end", "interrupted")]
    rerun = subprocess.run(argv, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    for d in runs.glob("c/*/seed*"):
        assert _train_steps(d) == list(range(1, steps + 1))  # no step lost or trained twice
        assert json.loads((d / "result.json").read_text())["steps"] == steps


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the workers")
def test_a_killed_sweep_driver_takes_its_workers_along(tmp_path):
    """SIGKILL of `rnnlab sweep --workers 2`: both workers die within 5 s (the one pool's
    parent-death setup). Before, the sweep's own pool lacked it: the workers trained on, then
    slept forever."""
    pytest.importorskip("optuna")
    spec = tmp_path / "s.toml"
    sets = tiny_job(steps=2000)
    spec.write_text(
        f'name = "k"\npreset = "demo/lstm"\nset = {json.dumps(sets)}\ntrials = 4\npruner = "none"\n'
        '[space]\n"optim.lr" = { type = "loguniform", low = 1e-3, high = 1e-2 }\n'
    )
    out = tmp_path / "sw"
    driver = subprocess.Popen(
        [sys.executable, "-m", "rnnlab.cli", "sweep", str(spec), "--out", str(out), "--workers", "2"],
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(
            lambda: len(list(out.glob("trials/*/checkpoint.pt"))) >= 2 or driver.poll() is not None, timeout=300
        )  # (starting torch, Optuna and two workers takes minutes on a loaded machine)
        assert driver.poll() is None
        kill_driver_and_check_its_workers_die(driver, "sweep workers")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_job_resources_follow_the_config(tmp_path):
    j = job_for("demo/lstm", TINY + ["train.threads=3"], tmp_path)
    assert (j.threads, j.gpus) == (3, 0)
    from rnnlab.backends.ray import remote_options

    assert remote_options(j)["num_cpus"] == 3 and remote_options(j)["num_gpus"] == 0
    # device auto (the default): a GPU only where the cluster has one; cuda: always one
    assert remote_options(j, cluster_gpus=4)["num_gpus"] == 1
    cpu = job_for("demo/lstm", TINY + ['train.device="cpu"'], tmp_path)
    assert remote_options(cpu, cluster_gpus=4)["num_gpus"] == 0
    cuda = job_for("demo/lstm", TINY + ['train.device="cuda"'], tmp_path)
    assert cuda.gpus == 1 and remote_options(cuda)["num_gpus"] == 1


def test_unreachable_or_malformed_ray_address_is_a_one_line_error(tmp_path, capsys):
    suite = write_suite(tmp_path / "s.toml")
    port = free_port()  # nothing listens there
    argv = ["suite", str(suite), "--runs-dir", str(tmp_path / "r"), "--backend", "ray"]
    assert main(argv + ["--address", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("rnnlab: error:") and f"127.0.0.1:{port}" in err and "ray start --head" in err
    assert main(argv + ["--address", "localhost"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err
    assert not list((tmp_path / "r").rglob("result.json"))
    pytest.importorskip("optuna")  # a sweep makes nothing either (before: its study.db and sweep.json)
    sweep = tmp_path / "w.toml"
    sweep.write_text(
        f'name = "w"\npreset = "demo/rnn"\nset = {json.dumps(TINY)}\ntrials = 1\n'
        '[space]\n"optim.lr" = { type = "loguniform", low = 1e-3, high = 1e-2 }\n'
    )
    assert (
        main(["sweep", str(sweep), "--out", str(tmp_path / "sw"), "--backend", "ray", "--address", f"127.0.0.1:{port}"])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("rnnlab: error:") and f"127.0.0.1:{port}" in err
    assert not (tmp_path / "sw").exists()


@pytest.fixture(scope="module")
def ray_here(tmp_path_factory):
    """One local Ray instance (2 CPUs, no GPU) for this module's in-process Ray tests, started in
    a directory of its own: its tasks keep that working directory, as a cluster's tasks keep
    the one where `ray start` ran."""
    ray = pytest.importorskip("ray")
    home = tmp_path_factory.mktemp("ray-start-dir")
    cwd = os.getcwd()
    os.chdir(home)
    try:
        try:
            ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
        except Exception:  # noqa: BLE001 - "timed out during startup" on an overloaded machine: once more
            ray.shutdown()
            ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    finally:
        os.chdir(cwd)
    yield home
    ray.shutdown()


# about 13 s on an idle 2-core machine (Ray's start dominates): in the default suite, so CI starts a real Ray instance
def test_ray_local_instance_matches_local_backend(tmp_path, capsys, ray_here):
    """A suite on a local Ray instance gives the same results as the process pool."""
    suite = write_suite(tmp_path / "s.toml", seeds=(1,))
    assert main(["suite", str(suite), "--runs-dir", str(tmp_path / "local"), "--jobs", "2"]) == 0
    assert main(["suite", str(suite), "--runs-dir", str(tmp_path / "ray"), "--backend", "ray"]) == 0
    err = capsys.readouterr().err
    assert "ray: 2 tasks" in err and "[2/2]" in err
    assert results(tmp_path / "ray") == results(tmp_path / "local") and len(results(tmp_path / "ray")) == 2


def test_ray_paths_given_relative_to_the_driver_are_used_there(tmp_path, capsys, monkeypatch, ray_here):
    """A relative --runs-dir / --out (the default `runs` is relative) is made absolute at the
    driver before it is shipped. Before, Ray tasks wrote under the directory where the cluster
    was started, and the driver printed "no finished runs" and exited 0 (a sweep's trials.md
    pointed at directories that did not exist)."""
    pytest.importorskip("optuna")
    suite = write_suite(tmp_path / "s.toml", seeds=(1,), presets=("demo/rnn",))
    sweep = tmp_path / "w.toml"
    sweep.write_text(
        f'name = "w"\npreset = "demo/rnn"\nset = {json.dumps(TINY)}\ntrials = 1\npruner = "none"\n'
        '[space]\n"optim.lr" = { type = "loguniform", low = 1e-3, high = 1e-2 }\n'
    )
    here = tmp_path / "driver"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["suite", str(suite), "--backend", "ray", "--runs-dir", "runs"]) == 0
    out = capsys.readouterr().out
    assert "no finished runs" not in out and "test/loss" in out
    assert len(list((here / "runs").rglob("result.json"))) == 1
    assert main(["sweep", str(sweep), "--backend", "ray", "--out", "sw"]) == 0
    capsys.readouterr()
    assert (here / "sw" / "trials" / "trial-0000" / "result.json").exists()
    assert not list(ray_here.rglob("result.json"))  # nothing where the cluster was started


def test_ray_device_requests_are_checked_against_the_cluster(tmp_path, capsys, ray_here):
    """A run that asks for a GPU (or more CPUs than any node has) on a cluster without one is a
    one-line error before anything is submitted, not a task that waits forever; `--device cuda`
    with `--backend ray` is checked against the cluster, not against the driver's machine."""
    pytest.importorskip("optuna")
    suite = write_suite(tmp_path / "s.toml", seeds=(1,), presets=("demo/rnn",))
    runs = tmp_path / "runs"
    for extra, words in (
        (["--device", "cuda"], ["1 GPU", "'cuda'", "no node of the local Ray instance"]),
        (["--set", 'train.device="cuda:0"'], ["1 GPU", "'cuda:0'", "--num-gpus"]),
        (["--set", "train.threads=64"], ["64 CPUs", "train.threads", "largest has 2"]),
    ):
        t0 = time.time()
        assert main(["suite", str(suite), "--backend", "ray", "--runs-dir", str(runs), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("rnnlab: error:") and all(w in err[-1] for w in words), err
        assert time.time() - t0 < 60 and not runs.exists()
    sweep = tmp_path / "w.toml"
    sweep.write_text(
        f'name = "w"\npreset = "demo/rnn"\nset = {json.dumps(TINY)}\ntrials = 1\n'
        '[space]\n"optim.lr" = { type = "loguniform", low = 1e-3, high = 1e-2 }\n'
    )
    assert main(["sweep", str(sweep), "--backend", "ray", "--out", str(tmp_path / "sw"), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "a worker of sweep w asks Ray for 1 GPU" in err, err
    # nothing made: a study made with --device cuda would refuse the same sweep with --device cpu
    assert not (tmp_path / "sw").exists()


@pytest.mark.slow
def test_ray_cluster_survives_a_killed_driver(tmp_path):
    """A head node on 127.0.0.1, a suite driven through --address, the driver SIGKILLed mid-way and
    restarted: every run ends exactly once, with results equal to the local backend's."""
    pytest.importorskip("ray")
    suite = write_suite(tmp_path / "s.toml", steps=300, seeds=(1, 2, 3))
    env = clean_env()
    head, port = start_head(env)
    runs = tmp_path / "ray"
    try:
        t0 = time.time()
        driver = [
            sys.executable,
            "-m",
            "rnnlab.cli",
            "suite",
            str(suite),
            "--runs-dir",
            str(runs),
            "--backend",
            "ray",
            "--address",
            f"127.0.0.1:{port}",
        ]
        first = subprocess.Popen(driver, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while time.time() - t0 < 300 and not list(runs.rglob("result.json")):
            time.sleep(0.2)
        assert first.poll() is None, "the driver finished before it could be killed"
        done_before = len(list(runs.rglob("result.json")))
        first.kill()
        first.wait()
        assert 1 <= done_before < 6
        second = subprocess.run(driver, env=env, capture_output=True, text=True, timeout=600)
        assert second.returncode == 0, second.stderr[-2000:]
        assert second.stderr.count("[done]") >= done_before
    finally:
        stop_head(head)
    run_dirs = sorted(p.parent for p in runs.rglob("config.json"))
    assert len(run_dirs) == 6
    for rd in run_dirs:
        ends = [e for e in events(rd) if e["event"] == "end"]
        assert [e["status"] for e in ends] in (["trained"], ["resumed"]), (rd, events(rd))
    assert main(["suite", str(suite), "--runs-dir", str(tmp_path / "local"), "--jobs", "2"]) == 0
    assert results(runs) == results(tmp_path / "local")


def test_docs_overhead_table_is_the_recorded_one():
    import importlib.util

    root = Path(__file__).parents[2]
    spec = importlib.util.spec_from_file_location("backend_overhead", root / "benchmarks" / "backend_overhead.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    record = json.loads((root / "docs" / "backend-overhead.json").read_text())
    rows = record if isinstance(record, list) else record["rows"]  # a bare list before records had conditions
    assert {r["backend"] for r in rows} >= {"local pool (fresh processes)", "ray (warm workers)"}
    assert mod.render(record) in (root / "docs" / "sweeps.md").read_text()


def test_the_plans_gpu_section_runs_on_a_local_ray_instance(tmp_path, capsys, ray_here):
    """``rnnlab reproduce plan``'s GPU section end to end: a run over the budget goes to the GPU
    suite, and its printed ``rnnlab suite ... --backend ray --device cuda`` command runs on a
    local Ray instance (with ``--device cpu``, this machine having no GPU, and a few steps)."""
    import shlex

    import tomllib

    from conftest import write_record
    from rnnlab.config import dump_toml
    from rnnlab.ledger.plan import main_plan

    cond = {"threads": 1, "device": "cpu", "cpu_model": "Test CPU"}
    rec = write_record(
        tmp_path / "records",
        "nnrnn/copy",
        1,
        {"test/loss": 0.01},
        result_extra={"train_time_s": 90000.0, "eval_time_s": 100.0, "conditions": cond},
    )
    assert main_plan([rec.parents[1]], "1m", "nnrnn", str(tmp_path / "plan.toml")) == 0
    out = capsys.readouterr().out
    gpu = [c for c in out.split("`") if c.startswith("rnnlab suite ") and "--backend ray" in c]
    assert gpu, out
    argv = shlex.split(gpu[0])[1:]
    assert argv[argv.index("--device") + 1] == "cuda"
    argv[argv.index("--device") + 1] = "cpu"
    suite = tmp_path / Path(argv[1]).name  # the suite file the plan wrote beside plan.toml
    spec = tomllib.loads(suite.read_text())
    assert "nnrnn/copy" in spec["presets"]
    spec["presets"] = ["nnrnn/copy"]  # the GPU section's data-free run (PTB needs its files)
    spec["seeds_of"] = {"nnrnn/copy": spec["seeds_of"]["nnrnn/copy"]}
    spec["set_of"] = {k: v for k, v in spec.get("set_of", {}).items() if k == "nnrnn/copy"}
    assert spec["set_of"]["nnrnn/copy"][0].startswith("train.checkpoint_every=")  # a 25-hour run's own
    suite.write_text(dump_toml(spec))
    argv[1] = str(suite)
    over = ["--set", "train.steps=3", "--set", "train.eval_every=3", "--runs-dir", str(tmp_path / "runs")]
    assert main(argv + over) == 0
    done = sorted(p.parent.name for p in (tmp_path / "runs").rglob("result.json"))
    assert done == ["seed2", "seed3"]
