"""Run directories, in one home: their layout, identity (the configuration key and the directory
name), the lock that gives each run one writer, checkpoint files, provenance, ``load_run`` and
"is finished".

A run *is* its resolved configuration, seed aside. ``config_key`` hashes that configuration
without ``config.RUN_KEY_OMITS`` (``name``, ``description``, ``paper``, ``train.seed`` and the
execution keys ``train.threads``, ``train.device``, ``train.tensorboard``); two runs with the same key are seeds of one
experiment, two runs with different keys never share a directory or a table row.

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
it over and says so.

The files of a run (:class:`RunFiles`): ``config.json`` (the resolved configuration),
``task.json`` (what rebuilding the model needs without the data), ``metrics.jsonl`` (one JSON
object per logged step and evaluation), ``checkpoint.pt`` (everything a resume needs, written
atomically at every evaluation), ``best.pt`` (the weights of the best validation score),
``result.json`` (written last: a run with it is finished) and ``tensorboard/``. A records folder
stores ``config.json``, ``task.json``, ``metrics.jsonl`` and ``result.json`` compressed
(:attr:`RunFiles.COMPRESSED`; ``metrics.jsonl`` in columns, :mod:`rnnlab.columns`), and every
reader takes every form through :func:`read_stored` / :func:`read_jsonl`.

torch is imported only by the functions that read or write weights (and ``load_run``): the
file-only commands (``rnnlab table``, ``list``) import this module and must start at once.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import math
import os
import platform
import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .config import RUN_KEY_OMITS, RUN_KEY_OMITS_AT_DEFAULT, ConfigError, as_dict, check_name, flatten, load_json
from .stored import (  # noqa: F401  (the stored forms' one home; re-exported here)
    COLS,
    STORED_SUFFIXES,
    XZ,
    XZ_PRESET,
    StoredFileDamaged,
    _damaged,
    _missing,
    plain_name,
    read_stored,
    stored,
)

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"

__all__ = [
    "CheckpointError",
    "RunExists",
    "RunFiles",
    "RunLocked",
    "RunWriteError",
    "StoredFileDamaged",
    "atomic_save",
    "atomic_write_text",
    "check_name",
    "claim",
    "config_key",
    "differences",
    "dir_name",
    "git_state",
    "identity",
    "is_finished",
    "load_checkpoint",
    "load_run",
    "load_weights",
    "plain_name",
    "read_jsonl",
    "read_stored",
    "run_dir",
    "runtime_conditions",
    "saved_config",
    "saved_key",
    "source_hash",
    "stored",
    "stored_form",
    "versions",
    "write_stored",
]


class NoSuchPath(FileNotFoundError):
    """A path the user named does not exist, or is not what the command reads (a runs folder, a
    run directory): a usage error, like an unknown preset (the CLI exits 2)."""


class RunLocked(RuntimeError):
    """Another process holds the run directory's lock."""


class RunExists(RuntimeError):
    """The run directory already holds a checkpoint and ``resume`` was not asked for."""


class RunWriteError(RuntimeError):
    """A file of the run directory cannot be written (a full disk, a file-size limit, a path
    that is a file, a read-only directory); the message names the file and the fix."""


class CheckpointError(RuntimeError):
    """checkpoint.pt / best.pt is damaged, truncated, non-finite or from another run."""


# ---------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class RunFiles:
    """The files of one run directory: ``RunFiles(run_dir).checkpoint`` and so on; the one place
    that names them (the names are class attributes: ``RunFiles.RESULT`` is "result.json")."""

    root: Path

    CONFIG: ClassVar[str] = "config.json"
    TASK: ClassVar[str] = "task.json"
    METRICS: ClassVar[str] = "metrics.jsonl"
    CHECKPOINT: ClassVar[str] = "checkpoint.pt"
    BEST: ClassVar[str] = "best.pt"
    RESULT: ClassVar[str] = "result.json"
    #: the record of a run stopped by a non-finite loss, gradient norm or weight (no test
    #: scores: what it reached is its metrics.jsonl up to the step it diverged at)
    DIVERGED: ClassVar[str] = "diverged.json"
    ANALYSIS: ClassVar[str] = "analysis.json"  # the analysis record (rnnlab.analysis.record)
    TENSORBOARD: ClassVar[str] = "tensorboard"
    LOCK: ClassVar[str] = LOCK_NAME
    #: the small files that make a run's record (copied by ``rnnlab ledger collect`` and the
    #: demo's record; never the checkpoints), ``result.json`` last: the order to copy them in
    RECORD: ClassVar[tuple[str, ...]] = (CONFIG, TASK, METRICS, ANALYSIS, DIVERGED, RESULT)
    #: the record files a records folder stores compressed (``metrics.jsonl.cols.xz``, the bulk
    #: of a record, and ``config.json.xz``, ``task.json.xz``, ``result.json.xz``); the rare
    #: analysis.json and diverged.json stay plain. Read every form with :func:`read_stored` /
    #: :func:`read_jsonl`; a live run directory writes them all plain
    COMPRESSED: ClassVar[tuple[str, ...]] = (CONFIG, TASK, METRICS, RESULT)

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config(self) -> Path:
        return self.root / self.CONFIG

    @property
    def task(self) -> Path:
        return self.root / self.TASK

    @property
    def metrics(self) -> Path:
        return self.root / self.METRICS

    @property
    def checkpoint(self) -> Path:
        return self.root / self.CHECKPOINT

    @property
    def best(self) -> Path:
        return self.root / self.BEST

    @property
    def result(self) -> Path:
        return self.root / self.RESULT

    @property
    def diverged(self) -> Path:
        return self.root / self.DIVERGED

    @property
    def analysis(self) -> Path:
        return self.root / self.ANALYSIS

    @property
    def tensorboard(self) -> Path:
        return self.root / self.TENSORBOARD

    @property
    def lock(self) -> Path:
        return self.root / self.LOCK

    def record(self) -> list[Path]:
        """The record files (:attr:`RECORD`) this run directory holds, each plain or
        compressed (:func:`stored`), ``result.json`` last."""
        return [p for p in (stored(self.root / n) for n in self.RECORD) if p is not None]

    def stored(self, name: str) -> Path | None:
        """The file holding the run file ``name`` (``RunFiles.METRICS``, ...), plain or
        compressed (:func:`stored`); None when the run has none."""
        return stored(self.root / name)

    def has(self, name: str) -> bool:
        """Whether the run directory holds the run file ``name`` in any form (``result.json``
        or, in a record, ``result.json.xz``: the run is finished)."""
        return stored(self.root / name) is not None

    def read_result(self) -> dict:
        """``result.json`` (plain or compressed), parsed."""
        return json.loads(read_stored(self.result))

    @classmethod
    def below(cls, root: str | Path, name: str = RESULT) -> list[Path]:
        """Every file called ``name`` (a run file's name; by default ``result.json``: one per
        finished run) below ``root``, sorted; for a name records store compressed
        (:attr:`COMPRESSED`) also its compressed forms, one file per run directory (the plain
        one where several exist: :func:`stored`). Read what it gives with :func:`read_stored`."""
        found = set(Path(root).rglob(name))
        if name in cls.COMPRESSED:
            for suffix in STORED_SUFFIXES:
                found |= {p for p in (stored(plain_name(q)) for q in Path(root).rglob(name + suffix)) if p is not None}
        return sorted(found)

    @classmethod
    def outcomes(cls, root: str | Path) -> list[Path]:
        """The record of every run below ``root`` that ended: its ``result.json``, or for a run
        stopped by divergence and not finished since, its ``diverged.json``; sorted."""
        done = cls.below(root)
        finished = {p.parent for p in done}
        return sorted(done + [p for p in cls.below(root, cls.DIVERGED) if p.parent not in finished])


def is_finished(run_dir: str | Path, cfg=None) -> bool:
    """Whether ``run_dir`` holds a finished run (its ``result.json``, plain or, in a record,
    compressed), and, with ``cfg``, one of that configuration (the saved configuration,
    re-resolved through today's dataclasses, has ``cfg``'s key)."""
    files = RunFiles(Path(run_dir))
    if not files.has(files.RESULT):
        return False
    return cfg is None or resolved_saved_key(files.root) == config_key(cfg)


# ---------------------------------------------------------------------------- identity


def identity(cfg) -> dict:
    """The part of a resolved configuration that names a run, seed aside: the configuration
    without ``config.RUN_KEY_OMITS`` (labels, ``train.seed``, execution keys), and without the
    keys of ``config.RUN_KEY_OMITS_AT_DEFAULT`` where they hold their default (keys added later:
    an earlier run keeps its key)."""
    d = json.loads(json.dumps(as_dict(cfg), default=str))
    for key in (*RUN_KEY_OMITS, *RUN_KEY_OMITS_AT_DEFAULT):
        *sections, last = key.split(".")
        node = d
        for part in sections:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and (key in RUN_KEY_OMITS or node.get(last) == RUN_KEY_OMITS_AT_DEFAULT[key]):
            node.pop(last, None)
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


def differences(a, b) -> dict[str, tuple]:
    """``{key: (value in a, value in b)}`` for every identity key where ``a`` and ``b`` differ
    (keys spelt as ``--set`` spells them: ``task.L``)."""
    fa, fb = flatten(_canonical(identity(a))), flatten(_canonical(identity(b)))
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)}


# ---------------------------------------------------------------------------- names

_NAME_OK = re.compile(r"^[A-Za-z0-9._+=@,-]+$")


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
    name = check_name(as_dict(cfg)["name"])
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
    """``run_dir/config.json`` (plain or compressed) as a dict (None if missing or unreadable)."""
    try:
        d = json.loads(read_stored(RunFiles(run_dir).config))
    except (OSError, ValueError, StoredFileDamaged):
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
    try:
        return config_key(load_json(RunFiles(run_dir).config))
    except (OSError, ValueError, ConfigError, AttributeError, TypeError, StoredFileDamaged):
        return None


def run_dir(parent: str | Path, cfg, base=None, resume: bool = False) -> Path:
    """The run directory of ``cfg`` below ``parent`` (see the module docstring)."""
    d = as_dict(cfg)
    seed = d["train"]["seed"]
    name = dir_name(cfg, base)
    folder = Path(parent) / name
    if not resume and name == d["name"] and folder.is_dir():
        key = config_key(cfg)
        others = [s for s in [folder, *folder.glob("seed*")] if RunFiles(s).has(RunFiles.CONFIG)]
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

    def acquire(self) -> RunLock:
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
                raise RunLocked(
                    f"{self.run_dir} is in use: {describe_holder(self.path)}; wait for it "
                    f"to finish or stop it (kill PID), or choose another directory"
                ) from None
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
                state = (
                    "no longer running"
                    if host == socket.gethostname() and not pid_alive(pid)
                    else "no longer holding it"
                )
                self.took_over = (
                    f"took over the stale lock of {self.run_dir} left by pid {pid} on {host} "
                    f"(started {info.get('started', '?')}, {state})"
                )
            except (ValueError, TypeError, AttributeError):
                self.took_over = f"took over a stale lock of {self.run_dir} (unreadable holder record)"
            log.warning(self.took_over)
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "command": _command(),
        }
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        except OSError as e:  # a full disk or a file-size limit of 0: not even the holder record fits
            self.release()  # the lock file goes, so the directories made for it can go too
            raise write_error(self.path, e) from None
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
    if argv[0].endswith(("rnnlab/cli/__main__.py", "/rnnlab")) or argv[0] == "rnnlab":
        argv[0] = "rnnlab"
    return " ".join(argv)


def describe_holder(lock_path: Path) -> str:
    try:
        info = json.loads(Path(lock_path).read_text())
        return (
            f"locked by pid {info.get('pid')} on {info.get('host')} since {info.get('started')} ({info.get('command')})"
        )
    except (OSError, ValueError, AttributeError):
        return f"locked by another process ({lock_path})"


def check_path_length(path: str | Path) -> None:
    """A one-line :class:`ConfigError` naming the part of ``path`` longer than the file system
    takes (a name of more than NAME_MAX bytes, usually 255), or the whole path beyond PATH_MAX,
    before anything is created: ``mkdir`` would make every folder above it first and then fail
    with "File name too long", naming no part."""
    path = Path(path)
    anchor = next((q for q in (path, *path.parents) if q.exists()), Path("."))
    try:
        name_max = os.pathconf(anchor, "PC_NAME_MAX")
        path_max = os.pathconf(anchor, "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows) or no such limit
        name_max, path_max = 255, 4096
    for part in path.parts:
        n = len(os.fsencode(part))
        if n > name_max:
            shown = part if len(part) <= 60 else f"{part[:28]}...{part[-28:]}"
            raise ConfigError(
                f"the path part {shown!r} ({n} bytes) is longer than the {name_max} bytes a file or folder name "
                f"may have here; shorten it (the run name, name=..., or --out / --runs-dir)"
            )
    total = len(os.fsencode(str(path.absolute())))
    if total >= path_max:
        raise ConfigError(
            f"the path {str(path)[:60]!r}... is {total} bytes long, more than the {path_max} a path may have here; "
            f"shorten the run name (name=...) or choose a shorter --out / --runs-dir"
        )


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
        check_path_length(self.run_dir)  # before any directory is made
        p = self.run_dir
        while not p.exists():
            self.created.append(p)
            p = p.parent
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            self._remove_created()
            raise ConfigError(
                f"run directory {self.run_dir} is a file or lies below one; choose another --out / --runs-dir"
            ) from None
        except BaseException:
            self._remove_created()  # the directories made on the way (a failed start leaves none)
            raise
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
    metrics = RunFiles(run_dir).metrics
    try:
        if RunFiles(run_dir).checkpoint.exists() or (metrics.exists() and read_jsonl(metrics)[0]):
            return []
        added = [p for p in run_dir.iterdir() if p.name not in before and p.name != LOCK_NAME]
        for p in added:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    except OSError:  # best effort: the error that ended the start is the one to report
        return []
    return sorted(p.name for p in added)


# ---------------------------------------------------------------------------- stored files


def stored_form(path: str | Path, data: bytes) -> tuple[Path, bytes]:
    """The stored file of the run file ``path`` (its plain name) holding ``data`` and its bytes:
    ``<name>.xz`` (the xz format, CRC32-checked, preset :data:`XZ_PRESET`), or for a
    ``metrics.jsonl`` its columns, ``metrics.jsonl.cols.xz``, where they give ``data`` back byte
    for byte and are the smaller (all but a log of a few rows)."""
    import lzma

    plain = plain_name(path)
    xz = lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32, preset=XZ_PRESET)
    if plain.name == RunFiles.METRICS:
        from . import columns

        packed = columns.encode(data)
        if packed is not None and len(packed) < len(xz):
            return plain.with_name(plain.name + COLS), packed
    return plain.with_name(plain.name + XZ), xz


def write_stored(path: str | Path, data: bytes, form: tuple[Path, bytes] | None = None) -> Path:
    """Write ``data``, the content of the run file ``path`` (its plain name: ``metrics.jsonl``),
    in its stored form (:func:`stored_form`), atomically: a ``metrics.jsonl`` in columns
    (``metrics.jsonl.cols.xz``, :mod:`rnnlab.columns`) where they give ``data`` back byte for byte
    and are the smaller, anything else xz-compressed (``+ .xz``). The file is read back and compared before its path is returned (a
    file that would not read back equal is never left in place: :class:`RunWriteError`); the
    other stored form of the same file, if one was there, is removed (the plain file is the
    caller's). ``form``: what :func:`stored_form` gave for ``data``, where the caller has it."""
    target, packed = form or stored_form(path, data)
    plain = plain_name(path)
    _write_bytes_atomic(target, packed)
    try:
        back = read_stored(target)
    except (StoredFileDamaged, OSError) as e:
        back = e
    if back != data:
        target.unlink(missing_ok=True)
        raise RunWriteError(f"{target} did not read back equal to what was written; check the disk and write it again")
    for suffix in STORED_SUFFIXES:
        other = plain.with_name(plain.name + suffix)
        if other != target:
            other.unlink(missing_ok=True)
    return target


# ---------------------------------------------------------------------------- metrics.jsonl


def read_jsonl(path: str | Path) -> tuple[list[dict], list[int]]:
    """The rows of a ``metrics.jsonl`` (plain or, as records store it, in columns or
    xz-compressed: :func:`read_stored`) and the line numbers (1-based) that are not JSON objects
    with an integer ``step`` (a partial last line left by an interrupted write, or garbage)."""
    where = stored(path)
    if where is not None and where.name.endswith(COLS):  # the rows straight from the columns
        import lzma

        from . import columns

        try:
            decoded = columns.decode(where.read_bytes())
        except (lzma.LZMAError, EOFError, ValueError) as e:
            raise _damaged(where, e) from None
        rows, bad = [], []
        for i, row in enumerate(decoded, 1):  # no blank line: the text is one json.dumps line a row
            if isinstance(row.get("step"), int):
                rows.append(row)
            else:
                bad.append(i)
        return rows, bad
    rows, bad = [], []
    data = read_stored(path)
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


# ---------------------------------------------------------------------------- writing files


def _write_fix(e: OSError, path: Path | None = None) -> str:
    if e.errno in (errno.EFBIG, errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        if path is not None and not RunFiles(Path(path).parent).checkpoint.exists():
            # before the first checkpoint there is nothing to resume: the run starts again
            return (
                "the disk is full or a file-size limit was reached: free space (or choose another --out) "
                "and start the run again (without --resume: no checkpoint was written yet)"
            )
        return (
            "the disk is full or a file-size limit was reached: free space (or choose another --out) "
            "and continue with `rnnlab train ... --resume`; the files written before are intact"
        )
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "the directory is not writable: choose another --out / --runs-dir or fix its permissions"
    if e.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        return "a part of the path is a file, not a directory: choose another --out / --runs-dir"
    return "check the run directory (--out / --runs-dir)"


def write_error(path: Path, e: OSError) -> RunWriteError:
    return RunWriteError(f"cannot write {path}: {e.strerror or e}; {_write_fix(e, path)}")


def _write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to ``path.tmp`` then rename over ``path``: a failed write leaves ``path`` as it was
    (and removes the partial ``.tmp``)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise write_error(path, e) from None


def atomic_save(obj, path: Path) -> None:
    """``torch.save(obj)`` to ``path``, atomically (see :func:`atomic_write_text`)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    _write_bytes_atomic(path, buf.getvalue())


def atomic_copy(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` through a temporary file and a rename (as
    :func:`atomic_write_text`): ``dest`` is the old file or a whole copy, never a part."""
    _write_bytes_atomic(Path(dest), Path(src).read_bytes())


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader sees the old
    file or the new one, never a part."""
    _write_bytes_atomic(path, text.encode("utf-8"))


# ---------------------------------------------------------------------------- checkpoints


def all_finite(state_dict: dict) -> bool:
    """True when every floating-point (or complex) tensor of ``state_dict`` is finite."""
    import torch

    return all(
        bool(torch.isfinite(v).all())
        for v in state_dict.values()
        if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())
    )


#: what every checkpoint.pt holds (besides scheduler, scaler, carried state and its config)
CHECKPOINT_KEYS = ("model", "optimizer", "rng", "progress")


def load_checkpoint(path: Path, *, full: bool, map_location="cpu") -> dict:
    """Read ``checkpoint.pt`` (``full=True``: the trainer's dict) or a weights file (best.pt:
    a state dict, or a checkpoint's ``"model"``); anything unreadable is a
    :class:`CheckpointError` naming the file and the fix."""
    import torch

    fix = (
        f"delete {path.name} (the run then starts over without --resume) or restore it from a copy"
        if full
        else f"delete {path.name} or restore it from a copy; checkpoint.pt holds the last weights"
    )
    try:
        obj = torch.load(path, weights_only=True, map_location=map_location)
    except FileNotFoundError:
        raise
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on damage
        why = (getattr(e, "strerror", None) or str(e) or type(e).__name__).splitlines()[0][:160]
        raise CheckpointError(f"{path} is damaged or truncated ({why}); {fix}") from None
    if full:
        missing = [k for k in CHECKPOINT_KEYS if not isinstance(obj, dict) or k not in obj]
        if missing:
            raise CheckpointError(f"{path} is not a checkpoint written by `rnnlab train` (missing {missing}); {fix}")
        weights = obj["model"]
    else:
        weights = obj["model"] if isinstance(obj, dict) and "model" in obj else obj
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise CheckpointError(f"{path} does not hold model weights (a state dict of tensors); {fix}")
    if not all_finite(weights):
        raise CheckpointError(f"{path} holds non-finite (NaN/inf) weights; {fix}")
    return obj


def load_weights(model, weights: dict, path: Path) -> None:
    """``model.load_state_dict(weights)``; weights of another model are a :class:`CheckpointError`."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        first = str(e).splitlines()[0] if str(e) else "mismatch"
        raise CheckpointError(
            f"{path} holds weights of another model ({first}...); it does not belong to this run's "
            f"config.json: delete it or move it back to its own run directory"
        ) from None


# ---------------------------------------------------------------------------- provenance


def _package_version() -> str:
    # the package's version lives in its __init__ (already imported: it is this module's
    # parent); read there rather than imported, so that the package root, which re-exports
    # load_run from here, and this module do not import each other
    return sys.modules[__package__].__version__


def versions() -> dict:
    """The versions a run used: rnnlab, torch, numpy, Python and the platform."""
    import numpy
    import torch

    return {
        "rnnlab": _package_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def git_state(path: str | Path | None = None) -> dict | None:
    """``{"commit": sha, "dirty": bool, "untracked_src": n}`` of the git checkout holding ``path``
    (default: this package's source), or None where there is no git or no checkout (an installed
    wheel). ``dirty``: a tracked file differs from the commit, or a file under the checkout's
    ``src/`` is not tracked at all (``untracked_src`` counts those: a module the commit lacks
    changes what ran as surely as an edit)."""
    import subprocess

    where = Path(path) if path is not None else Path(__file__).resolve().parent

    def git(*args):
        return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10)

    try:
        sha = git("rev-parse", "HEAD")
        if sha.returncode != 0:
            return None
        st = git("status", "--porcelain", "--untracked-files=no")
        new = git("ls-files", "--others", "--exclude-standard", "--full-name", "--", ":/src")
    except (OSError, subprocess.SubprocessError):
        return None
    untracked = len(new.stdout.splitlines()) if new.returncode == 0 else None
    dirty = bool(st.stdout.strip()) or bool(untracked) if st.returncode == 0 else None
    return {"commit": sha.stdout.strip(), "dirty": dirty, "untracked_src": untracked}


def source_hash(root: str | Path | None = None) -> str:
    """sha256 (16 hex digits) of this package's Python sources and shipped presets, in path
    order: the code a run used, also where there is no git checkout (an installed wheel).
    ``root``: the package folder (default: this module's)."""
    root = Path(root) if root is not None else Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml") and p.is_file()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def runtime_conditions(threads: int, device=None, precision: str = "fp32") -> dict:
    """What a run's result records of where it ran: threads, allocator, subnormal floats, device and host."""
    import torch

    from .device import conditions
    from .runtime import denormal_conditions, malloc_conditions

    return {
        "threads": threads,
        "malloc": malloc_conditions(),
        "denormals": denormal_conditions(),
        **conditions(device or torch.device("cpu"), precision),
    }


# ---------------------------------------------------------------------------- loading a run


def load_run(
    path: str | Path,
    which: str = "best",
    data_dir: str | None = None,
    device: str | None = "cpu",
    data: bool | None = None,
):
    """Load a trained run for inference or re-scoring: returns ``(cfg, task, model)``.

    ``path``: a run directory or a checkpoint file inside one. ``which``: ``"best"`` (best.pt,
    the best validation score) or ``"last"`` (checkpoint.pt); a run without the file asked for
    is a ``FileNotFoundError`` (never the other file in its place). ``device``: where the model
    goes (``"cpu"`` by default, whatever device wrote the weights; ``"auto"``, ``"cuda"``, ...
    as ``train.device``). ``data``: None loads the task's data when it is available and
    otherwise rebuilds the task from the run's ``task.json`` (sizes, vocabularies: enough to run
    the model, no batches); True requires the data; False never reads it. Weights are read with
    ``torch.load(weights_only=True)``: no code in the file runs. The model is returned in eval
    mode.

    >>> from rnnlab import config, train
    >>> short = ["train.steps=2", "train.eval_every=2", "task.L=4", "task.val_size=8", "task.test_size=8"]
    >>> _ = train.train(config.load("demo/lstm", short), "example-run", progress=False)
    >>> cfg, task, model = load_run("example-run")  # best.pt, on the CPU
    >>> cfg.name, model.training
    ('demo-lstm', False)
    """
    from .device import resolve_device
    from .model import build_model

    if which not in ("best", "last"):
        raise ValueError(f"which must be 'best' or 'last', got {which!r}")
    device = resolve_device(device or "cpu")
    path = Path(path)
    if not path.exists():
        raise NoSuchPath(f"{path} does not exist; give a run directory (it holds config.json) or a checkpoint in one")
    files = RunFiles(path if path.is_dir() else path.parent)
    if not files.has(files.CONFIG):
        raise NoSuchPath(f"{files.root} is not a run directory: config.json is missing")
    cfg = load_json(files.config)
    task = _load_task(cfg, files, data_dir, data)
    model = build_model(cfg.model, task)
    ck_file = path if path.is_file() else _weights_file(files, which)
    state = load_checkpoint(ck_file, full=False, map_location=device)
    model.to(device)
    load_weights(model, state["model"] if "model" in state else state, ck_file)
    model.eval()
    return cfg, task, model


def _weights_file(files: RunFiles, which: str) -> Path:
    wanted, other = (files.best, files.checkpoint) if which == "best" else (files.checkpoint, files.best)
    if wanted.exists():
        return wanted
    flag = "last" if which == "best" else "best"
    hint = (
        f"; {other.name} exists: load it with which={flag!r} (rnnlab evaluate/analyze: --which {flag})"
        if other.exists()
        else "; neither weights file exists (the run has not reached an evaluation)"
    )
    raise FileNotFoundError(f"{files.root} has no {wanted.name} (which={which!r}){hint}")


def _load_task(cfg, files: RunFiles, data_dir: str | None, data: bool | None):
    """The run's task: with its data where ``data`` allows, else rebuilt from task.json."""
    from .tasks import build_task
    from .tasks.base import TaskInfo
    from .tasks.data import DataError

    if data is not False:
        try:
            return build_task(cfg.task, data_dir)
        except (DataError, FileNotFoundError) as e:
            if data or files.stored(files.TASK) is None:
                raise
            log.warning(
                f"{e.__class__.__name__}: data of task {cfg.task.name!r} unavailable; model rebuilt from {files.stored(files.TASK)}"
            )
    task_file = files.stored(files.TASK)
    if task_file is None:
        raise FileNotFoundError(
            f"{files.task} is missing (runs trained before rnnlab 0.2 lack it): load the run "
            f"with its data (data=None or True)"
        )
    try:
        meta = json.loads(read_stored(task_file))
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:  # a control character, truncation, garbage
        raise ConfigError(
            f"{task_file} is not readable ({type(e).__name__}: {e}); restore it from a copy, or load "
            f"the run with its data (data=True; rnnlab evaluate/analyze with the dataset present), which does "
            f"not read it"
        ) from None
    return TaskInfo(meta)
