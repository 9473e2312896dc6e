"""Run identity and run directories: the configuration key, directory names, one writer per run.

A run *is* its resolved configuration, seed aside. ``config_key`` hashes that configuration
(without ``name``, ``description``, ``paper``, ``train.seed`` and the execution-only keys
``train.threads``/``train.device``); two runs with the same key are seeds of one experiment,
two runs with different keys never share a directory or a table row.

Directory names (``run_dir``): ``<parent>/<name>/seed<k>`` for a preset run as the preset
defines it, ``<parent>/<name>-<overrides>-<hash>/seed<k>`` for a run whose configuration
differs from its preset (``--set`` values, other steps, a grid point); ``<overrides>`` is a
short readable list of the changed keys (left out when long) and ``<hash>`` the first six
characters of the key. If ``<parent>/<name>`` already holds runs of another configuration
(the preset was edited since), a new run gets ``<name>-<hash>`` instead of sharing it.

``claim(run_dir)`` takes the run directory's exclusive lock (``fcntl.flock`` on
``run_dir/.lock``, whose text names the holder: PID, host, start time, command). A second
claim, from this or another machine sharing the filesystem, raises ``RunLocked`` naming the
holder. The kernel drops the lock when its holder dies, even by SIGKILL; the next claim takes
it over and says so. Nothing here imports torch.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import socket
import sys
import time
from pathlib import Path

LOCK_NAME = ".lock"
# configuration keys that do not change what a run computes, only where and how fast
EXECUTION_KEYS = {("train", "threads"), ("train", "device"), ("train", "tensorboard")}
NOT_IDENTITY = {"name", "description", "paper"}


class RunLocked(RuntimeError):
    """Another process holds the run directory's lock."""


# ---------------------------------------------------------------------------- identity

def _as_dict(cfg) -> dict:
    return cfg if isinstance(cfg, dict) else cfg.to_dict()


def identity(cfg) -> dict:
    """The part of a resolved configuration that defines a run's results, seed aside."""
    d = json.loads(json.dumps(_as_dict(cfg), default=str))
    for k in NOT_IDENTITY:
        d.pop(k, None)
    train = d.get("train")
    if isinstance(train, dict):
        train.pop("seed", None)
        for section, key in EXECUTION_KEYS:
            d.get(section, {}).pop(key, None)
    return d


def _canonical(value):
    """JSON-stable form: floats that are whole numbers equal their ints (``lr = 1`` is ``1.0``)."""
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, float):
        return repr(value)
    return value


def config_key(cfg) -> str:
    """12 hex digits naming a run's configuration, seed aside (a RunConfig or its dict)."""
    text = json.dumps(_canonical(identity(cfg)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _leaves(d: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):  # an empty table adds no key
            out.update(_leaves(v, path + "."))
        else:
            out[path] = v
    return out


def _flat(cfg) -> dict[str, object]:
    """Identity leaves with the JSON layout's ``task.options.X`` spelled ``task.X`` (as in TOML)."""
    flat = _leaves(_canonical(identity(cfg)))
    return {k.replace("task.options.", "task.", 1): v for k, v in flat.items()}


def differences(a, b) -> dict[str, tuple]:
    """``{key: (value in a, value in b)}`` for every identity key where ``a`` and ``b`` differ."""
    fa, fb = _flat(a), _flat(b)
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)}


# ---------------------------------------------------------------------------- names

_NAME_OK = re.compile(r"^[A-Za-z0-9._+=@,-]+$")


def check_name(name: str) -> str:
    """A run name becomes a directory below the runs folder: refuse anything but a plain
    relative path (no absolute path, no ``..``/``.`` component, no empty component)."""
    from .config import ConfigError

    parts = str(name).split("/")
    if (not name or name.startswith(("/", "~")) or "\\" in name or "\x00" in name
            or any(p in ("", ".", "..") for p in parts)):
        raise ConfigError(
            f"run name {name!r} is not a plain relative path (no leading '/', '~', no '..' or '.' "
            f"components); set name = \"...\" in the preset or --set name=my-run"
        )
    return name


def _short_value(v) -> str:
    if isinstance(v, str) and _NAME_OK.match(v):
        return v
    if isinstance(v, (bool, int)) or v is None:
        return json.dumps(v)
    if isinstance(v, str):  # a canonical float (repr) or text with odd characters
        try:
            return f"{float(v):g}"
        except ValueError:
            return ""
    return ""  # lists, dicts: the hash tells them apart


def dir_name(cfg, base=None, readable_max: int = 40) -> str:
    """``<name>`` if ``cfg`` is ``base`` (its preset as defined), else ``<name>-<changes>-<hash>``
    where ``<changes>`` lists the changed keys' last part and value when that is short."""
    name = check_name(_as_dict(cfg)["name"])
    diff = differences(base, cfg) if base is not None else {"?": (None, None)}
    if not diff:
        return name
    parts = []
    for k, (_, new) in diff.items():
        v = _short_value(new)
        parts.append(f"{k.split('.')[-1]}={v}" if v else "")
    readable = "_".join(parts)
    key6 = config_key(cfg)[:6]
    if all(parts) and len(readable) <= readable_max and _NAME_OK.match(readable):
        return f"{name}-{readable}-{key6}"
    return f"{name}-{key6}"


def saved_config(run_dir: Path) -> dict | None:
    """``run_dir/config.json`` as a dict (None if missing or unreadable)."""
    try:
        d = json.loads((Path(run_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and isinstance(d.get("train"), dict) else None


def saved_key(run_dir: Path) -> str | None:
    """The configuration key of the run saved in ``run_dir`` (None if it has no readable config)."""
    d = saved_config(run_dir)
    try:
        return config_key(d) if d is not None else None
    except (ValueError, AttributeError, TypeError):
        return None


def resolved_saved_key(run_dir: Path) -> str | None:
    """Like ``saved_key`` but re-resolved through today's dataclasses, so keys added to the
    config since the run started count at their defaults (imports the config module)."""
    from .config import ConfigError, load_json

    try:
        return config_key(load_json(Path(run_dir) / "config.json"))
    except (OSError, ValueError, ConfigError, AttributeError, TypeError):
        return None


def run_dir(parent: str | Path, cfg, base=None, resume: bool = False) -> Path:
    """The run directory of ``cfg`` below ``parent`` (see the module docstring)."""
    d = _as_dict(cfg)
    seed = d["train"]["seed"]
    name = dir_name(cfg, base)
    folder = Path(parent) / name
    if not resume and name == d["name"] and folder.is_dir():
        key = config_key(cfg)
        others = [s for s in [folder, *folder.glob("seed*")] if (s / "config.json").exists()]
        if any(resolved_saved_key(s) not in (key, None) for s in others):
            folder = Path(parent) / f"{name}-{key[:6]}"  # the preset was edited since those runs
    return folder / f"seed{seed}"


# ---------------------------------------------------------------------------- the lock

_held: dict[str, list] = {}  # path -> [RunLock, depth]: a claim this process holds is re-entrant


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID runs on this host (one we may not signal counts as running;
    on Linux a zombie, which has exited and waits to be reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux) or it went meanwhile: kill(0) said it was there
    return state not in ("Z", "X")


# A holder that is dying (SIGKILL to a multi-threaded process) keeps its lock until its last
# thread has exited, a moment after its PID already reads as gone: so wait that long for it.
DYING_HOLDER_WAIT_S = 10.0


def _holder_is_dead(lock_path: Path) -> bool:
    try:
        info = json.loads(Path(lock_path).read_text())
        return info.get("host") == socket.gethostname() and not pid_alive(int(info.get("pid", -1)))
    except (OSError, ValueError, TypeError, AttributeError):
        return False


class RunLock:
    """The exclusive lock of one run directory (use ``claim``)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.fd: int | None = None
        self.took_over: str = ""

    def acquire(self) -> "RunLock":
        import fcntl

        dying_since, replaced = None, 0
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if _holder_is_dead(self.path):  # its exit is still releasing the lock
                    dying_since = dying_since or time.monotonic()
                    if time.monotonic() - dying_since < DYING_HOLDER_WAIT_S:
                        time.sleep(0.05)
                        continue
                raise RunLocked(f"{self.run_dir} is in use: {describe_holder(self.path)}; wait for it "
                                f"to finish or stop it (kill PID), or choose another directory") from None
            # the previous holder may have unlinked the file between our open and our lock
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
            replaced += 1
            if replaced >= 50:
                raise RunLocked(f"{self.run_dir}: could not take the lock {self.path} (it keeps being replaced)")
        self.fd = fd
        old = os.read(fd, 4096).decode(errors="replace").strip()
        if old:  # a holder that died without releasing (SIGKILL, power loss): the kernel dropped it
            try:
                info = json.loads(old)
                pid, host = int(info.get("pid", -1)), info.get("host", "?")
                state = ("no longer running" if host == socket.gethostname() and not pid_alive(pid)
                         else "no longer holding it")
                self.took_over = (f"took over the stale lock of {self.run_dir} left by pid {pid} on {host} "
                                  f"(started {info.get('started', '?')}, {state})")
            except (ValueError, TypeError, AttributeError):
                self.took_over = f"took over a stale lock of {self.run_dir} (unreadable holder record)"
            print(f"note: {self.took_over}", file=sys.stderr)
        record = {
            "pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": _command(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.path)  # while still holding it; a waiter re-checks the inode
        except FileNotFoundError:
            pass
        os.close(self.fd)  # closing the last descriptor drops the flock
        self.fd = None


def _command() -> str:
    argv = list(sys.argv) or ["python"]
    if argv[0].endswith(("rnnlab/cli.py", "/rnnlab")) or argv[0] == "rnnlab":
        argv[0] = "rnnlab"
    return " ".join(argv)


def describe_holder(lock_path: Path) -> str:
    try:
        info = json.loads(Path(lock_path).read_text())
        return (f"locked by pid {info.get('pid')} on {info.get('host')} since {info.get('started')} "
                f"({info.get('command')})")
    except (OSError, ValueError, AttributeError):
        return f"locked by another process ({lock_path})"


class claim:
    """``with claim(run_dir):`` hold the run directory's exclusive lock (creating the directory).

    Re-entrant within one process. A directory this claim created is removed again if it is
    left empty (a failed start leaves no stub)."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.created: list[Path] = []
        self.lock: RunLock | None = None

    def __enter__(self) -> RunLock:
        key = str(self.run_dir.resolve())
        if key in _held:
            _held[key][1] += 1
            self.lock = _held[key][0]
            return self.lock
        p = self.run_dir
        while not p.exists():
            self.created.append(p)
            p = p.parent
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            from .config import ConfigError

            raise ConfigError(f"run directory {self.run_dir} is a file or lies below one; "
                              f"choose another --out / --runs-dir") from None
        try:
            self.lock = RunLock(self.run_dir).acquire()
        except BaseException:
            self._remove_created()
            raise
        _held[key] = [self.lock, 1]
        return self.lock

    def __exit__(self, *exc) -> None:
        key = str(self.run_dir.resolve())
        entry = _held.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _held[key]
        entry[0].release()
        self._remove_created()

    def _remove_created(self) -> None:
        for p in self.created:  # deepest first; only if empty (nothing of value is removed)
            try:
                p.rmdir()
            except OSError:
                break


def discard_failed_start(run_dir: str | Path, before: set[str]) -> list[str]:
    """After a start that failed before training anything (no ``checkpoint.pt`` and no row in
    ``metrics.jsonl``: a model too large for memory, missing data with ``--tensorboard``, an
    error in the first step), remove what it wrote (``task.json``, ``config.json``, an empty
    ``metrics.jsonl``, ``tensorboard/``): a failed start leaves no stub, and what was in the
    directory before it (``before``: entry names) is kept. Nothing of value goes: no step was
    trained. The lock stays with its holder; ``claim`` then removes the directories it made.
    Returns the names removed."""
    import shutil

    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    try:
        if (run_dir / "checkpoint.pt").exists() or (metrics.exists() and read_jsonl(metrics)[0]):
            return []
        added = [p for p in run_dir.iterdir() if p.name not in before and p.name != LOCK_NAME]
        for p in added:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    except OSError:  # best effort: the error that ended the start is the one to report
        return []
    return sorted(p.name for p in added)


# ---------------------------------------------------------------------------- metrics.jsonl

def read_jsonl(path: str | Path) -> tuple[list[dict], list[int]]:
    """The rows of a ``metrics.jsonl`` and the line numbers (1-based) that are not JSON objects
    (a partial last line left by an interrupted write, or garbage)."""
    rows, bad = [], []
    with open(path, "rb") as f:
        data = f.read()
    for i, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            bad.append(i)
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
        else:
            bad.append(i)
    return rows, bad
