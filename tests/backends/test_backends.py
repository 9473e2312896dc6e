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

from rnnlab.backends import job_for, run_jobs, run_one
from rnnlab.cli import main

SRC = str(Path(__file__).parents[2] / "src")
TINY = ["train.steps=10", "train.eval_every=5", "task.L=10", "model.hidden_size=8", "train.batch_size=16",
        "task.val_size=64", "task.test_size=64"]


def write_suite(path: Path, steps: int = 10, seeds=(1, 2), presets=("demo/lstm", "demo/rnn")) -> Path:
    sets = [s.replace("train.steps=10", f"train.steps={steps}") for s in TINY]
    path.write_text(f'name = "tiny"\npresets = {json.dumps(list(presets))}\nseeds = {json.dumps(list(seeds))}\n'
                    f'set = {json.dumps(sets)}\nmetrics = ["test/loss"]\n')
    return path


def events(run_dir: Path) -> list[dict]:
    p = run_dir / "attempts.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def results(root: Path) -> dict:
    return {str(p.parent.relative_to(root)): {k: v for k, v in json.loads(p.read_text()).items()
                                              if k in ("final", "test", "steps", "best")}
            for p in sorted(root.rglob("result.json"))}


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
        [ray_bin, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", f"--temp-dir={temp}", f"--ray-client-server-port={free_port()}",
         f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
         f"--runtime-env-agent-port={free_port()}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
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
    return {**env, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "RAY_USAGE_STATS_ENABLED": "0", **extra}


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
    driver = [sys.executable, "-m", "rnnlab.cli", "suite", str(suite), "--backend", "ray", "--address", f"127.0.0.1:{port}"]
    try:
        refused = subprocess.run(driver + ["--runs-dir", str(tmp_path / "bad")], env=clean_env(RAY_AUTH_TOKEN=bad, RAY_NUM_REDIS_GET_RETRIES="2"),
                                 capture_output=True, text=True, timeout=300)
        ok = subprocess.run(driver + ["--runs-dir", str(tmp_path / "ray")], env=clean_env(RAY_AUTH_TOKEN=good),
                            capture_output=True, text=True, timeout=300)
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
    code = f"import sys, time; sys.path.insert(0, {SRC!r}); from rnnlab.rundir import claim\n" \
           f"with claim({str(d)!r}):\n    print('held', flush=True); time.sleep(float(sys.stdin.readline()))"
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


# about 13 s on an idle 2-core machine (Ray's start dominates): in the default suite, so CI starts a real Ray instance
def test_ray_local_instance_matches_local_backend(tmp_path, capsys):
    """A suite on a local Ray instance gives the same results as the process pool."""
    pytest.importorskip("ray")
    suite = write_suite(tmp_path / "s.toml", seeds=(1,))
    assert main(["suite", str(suite), "--runs-dir", str(tmp_path / "local"), "--jobs", "2"]) == 0
    assert main(["suite", str(suite), "--runs-dir", str(tmp_path / "ray"), "--backend", "ray"]) == 0
    err = capsys.readouterr().err
    assert "ray: 2 tasks" in err and "[2/2]" in err
    assert results(tmp_path / "ray") == results(tmp_path / "local") and len(results(tmp_path / "ray")) == 2


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
        driver = [sys.executable, "-m", "rnnlab.cli", "suite", str(suite), "--runs-dir", str(runs),
                  "--backend", "ray", "--address", f"127.0.0.1:{port}"]
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
