"""The Ray backend (optional extra ``rnnlab[ray]``): one Ray task per run.

Each task declares its resources (``num_cpus`` = the run's ``train.threads``, ``num_gpus=1``
when ``train.device`` is CUDA, or ``auto`` on a cluster with GPUs), so Ray packs runs onto the cluster's machines. Workers write
their run directories themselves: the run directory must be on a filesystem every node mounts
at the same path (NFS, a cluster filesystem); the driver only collects statuses. A task whose
worker process dies is retried by Ray (it resumes from the run's checkpoint); a run that fails
is reported and the others go on; a restarted driver skips finished runs and waits for the lock
of a run that a task of the old driver still trains (up to ``LOCK_WAIT`` s, then reports it
busy), so no run is trained twice.

Before anything is submitted, paths are made absolute at the driver (:func:`shipped`: a task
resolves a relative path against its own working directory, on a cluster where ``ray start``
ran) and every request is checked against the alive nodes (:func:`check_resources`: a GPU that
no node has would keep a task waiting forever).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
from pathlib import Path

from ..config import ConfigError
from .base import Job, run_one

#: how often Ray retries a task whose worker process died (each retry resumes the checkpoint)
MAX_RETRIES = 2
#: seconds a task waits for a run's lock held by another process (a task of a killed driver
#: that Ray has not stopped yet) before it reports the run busy
LOCK_WAIT = 120.0


def _run_task(job: Job) -> tuple[str, str]:
    return run_one(job, wait=LOCK_WAIT)


def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("the Ray backend needs Ray: pip install 'rnnlab[ray]'") from None
    return ray


def check_address(address: str, timeout: float = 5.0) -> None:
    """Fail fast, in one line, when nothing listens at ``address`` (``host:port`` of a Ray head's
    GCS). ``auto`` and ``ray://`` client addresses are left to Ray."""
    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"Ray address {address!r} must look like HOST:PORT (e.g. 10.0.0.5:6379) or 'auto'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(
            f"cannot reach a Ray cluster at {address!r} ({e.strerror or e}); start one with "
            f"`ray start --head --port {port}` on {host} or fix --address"
        ) from None


def token_available() -> bool:
    """Whether this machine holds a Ray authentication token (``RAY_AUTH_TOKEN``, the file named
    by ``RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token``: the places Ray itself reads)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(path).is_file() if path else (Path.home() / ".ray" / "auth_token").is_file()


def use_token_auth_for_address() -> bool:
    """Send the local token when connecting to a cluster by address.

    ``ray start --head`` turns token authentication on whenever the head machine holds a token
    (Ray >= 2.5x writes ``~/.ray/auth_token`` the first time a local instance starts), but
    ``ray.init(address=...)`` never turns it on by itself, so the driver is refused with
    "InvalidAuthToken". A client that sends a token also connects to a head without
    authentication, so when ``RAY_AUTH_MODE`` is unset and a token is available we switch this
    process (and its children) to token mode. An explicit ``RAY_AUTH_MODE`` is respected."""
    if "RAY_AUTH_MODE" in os.environ or not token_available():
        return os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
    os.environ["RAY_AUTH_MODE"] = "token"
    if "ray" in sys.modules:  # Ray caches its configuration; re-read it from the environment
        try:
            from ray._raylet import Config

            Config.initialize("")
        except (ImportError, AttributeError):
            pass
    return True


def _auth_hint(address: str) -> str:
    return (
        f"the Ray cluster at {address!r} refused this machine's authentication token; it uses "
        "token authentication (Ray's default when the head holds ~/.ray/auth_token). Run "
        "`ray get-auth-token` on the head and put the token in ~/.ray/auth_token here, or set "
        "RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) and RAY_AUTH_MODE=token"
    )


@contextlib.contextmanager
def session(address: str | None = None, num_cpus: int | None = None):
    """Connect to the cluster at ``address`` (None: start a local Ray instance) unless this
    process is already connected; disconnect at the end if we connected."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    kwargs = {"include_dashboard": False, "log_to_driver": False}
    if address:
        check_address(address)
        use_token_auth_for_address()
        kwargs = {"address": address, "log_to_driver": False}
    elif num_cpus:
        kwargs["num_cpus"] = num_cpus
    try:
        ray.init(**kwargs)
    except ray.exceptions.AuthenticationError:
        raise ConfigError(f"cannot connect: {_auth_hint(address)}") from None
    except ConnectionError as e:
        cause = e.__cause__ or e
        if "AuthToken" in str(cause) or type(cause).__name__ == "AuthenticationError":
            raise ConfigError(f"cannot connect: {_auth_hint(address)}") from None
        raise ConfigError(f"cannot connect to the Ray cluster at {address!r}: {e}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def remote_options(job: Job, cluster_gpus: float = 0) -> dict:
    """Ray resources of one run: its threads as CPUs; one GPU for ``train.device`` CUDA, and for
    ``auto`` on a cluster that has GPUs (a task without GPUs sees none, so ``auto`` means CPU)."""
    from ..device import gpus_requested

    gpus = gpus_requested(job.extra.get("device", "auto"), cluster_gpus)
    return {
        "num_cpus": job.threads,
        "num_gpus": gpus,
        "max_retries": MAX_RETRIES,
        "name": f"rnnlab:{job.label or job.run_dir}",
    }


def absolute(path: str | None) -> str | None:
    """``path`` made absolute here, at the driver: a task resolves a relative path against its
    own working directory (on a cluster, where ``ray start`` ran), not the driver's."""
    return None if path is None else str(Path(path).expanduser().absolute())


def shipped(job: Job) -> Job:
    """``job`` as it travels to a Ray task: run directory, data directory and a preset given
    as a file path made absolute at the driver."""
    preset = job.preset
    if Path(preset).suffix == ".toml" and Path(preset).exists():
        preset = absolute(preset)
    return dataclasses.replace(job, preset=preset, run_dir=absolute(job.run_dir), data_dir=absolute(job.data_dir))


def where(address: str | None) -> str:
    return f"the Ray cluster at {address}" if address else "the local Ray instance"


def check_resources(ray, needs: list[tuple[float, float, str, str]], address: str | None = None) -> None:
    """One line, before anything is submitted, when a task could never be scheduled: each of
    ``needs``, ``(cpus, gpus, what, device)``, must fit on one alive node of the cluster
    (a task asking for a GPU that no node has would wait forever)."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive", True)]
    have = ", ".join(f"{r.get('CPU', 0):g} CPU/{r.get('GPU', 0):g} GPU" for r in nodes) or "no alive node"
    for cpus, gpus, what, device in needs:
        if any(r.get("CPU", 0) >= cpus and r.get("GPU", 0) >= gpus for r in nodes):
            continue
        if gpus and not any(r.get("GPU", 0) >= gpus for r in nodes):
            raise ConfigError(
                f"{what} asks Ray for {gpus:g} GPU (train.device={device!r}), but no node of {where(address)} "
                f"has one (nodes: {have}); start workers with GPUs (`ray start ... --num-gpus N`) or train on "
                f"the CPU (--device cpu, or auto)"
            )
        largest = max((r.get("CPU", 0) for r in nodes), default=0)
        raise ConfigError(
            f"{what} asks Ray for {cpus:g} CPUs (train.threads={cpus:g}){f' and {gpus:g} GPU' if gpus else ''}, "
            f"but no node of {where(address)} has that much (nodes: {have}; the largest has {largest:g} CPUs); "
            f"lower train.threads (e.g. --set train.threads=1) or add a larger node"
        )


def run_jobs(jobs: list[Job], address: str | None = None, log=print, on_result=None) -> list[tuple[Job, str, str]]:
    out, n = [], len(jobs)
    with session(address) as ray:
        task = ray.remote(_run_task)
        gpus = ray.cluster_resources().get("GPU", 0)
        options = [remote_options(j, gpus) for j in jobs]
        check_resources(
            ray,
            [
                (o["num_cpus"], o["num_gpus"], f"run {j.run_dir}", j.extra.get("device", "auto"))
                for j, o in zip(jobs, options, strict=True)
            ],
            address,
        )
        pending = {task.options(**o).remote(shipped(j)): j for j, o in zip(jobs, options, strict=True)}
        nodes = len(ray.nodes())
        log(f"  ray: {n} tasks on {nodes} node(s), {ray.cluster_resources().get('CPU', 0):g} CPUs")
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                job = pending.pop(ref)
                try:
                    status, err = ray.get(ref)
                except Exception as e:  # the task failed beyond its retries (worker killed each time)
                    status, err = "failed", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                out.append((job, status, err))
                if on_result is not None:
                    on_result(job, status, err)
                log(f"  [{len(out)}/{n}] [{status}] {job.run_dir}" + (f": {err}" if err else ""))
    return out


def run_calls(
    fn,
    calls: list[tuple],
    resources: dict,
    address: str | None = None,
    on_result=None,
    tick=None,
    what: str = "task",
    device: str = "auto",
) -> None:
    """Run ``fn(*args)`` for each of ``calls`` as Ray tasks with ``resources`` (``num_cpus``,
    ``num_gpus``; checked against the cluster first); ``on_result(i, value, error)`` as each
    ends, ``tick()`` about once a second meanwhile. Paths in ``calls`` must already be absolute."""
    with session(address) as ray:
        check_resources(ray, [(resources["num_cpus"], resources["num_gpus"], what, device)], address)
        task = ray.remote(fn).options(**resources, max_retries=MAX_RETRIES)
        pending = {task.remote(*args): i for i, args in enumerate(calls)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in done:
                i = pending.pop(ref)
                try:
                    value, error = ray.get(ref), None
                except Exception as e:  # the task raised, or failed beyond its retries
                    msg = str(e).strip().splitlines()
                    value, error = None, f"{type(e).__name__}: {msg[-1] if msg else ''}"
                if on_result is not None:
                    on_result(i, value, error)
            if tick is not None:
                tick()
