"""The stored forms of a run file, and their one reader: a records folder keeps ``metrics.jsonl``
in columns (:mod:`rnnlab.columns`) and the JSON files xz-compressed, a live run directory writes
them plain. A low room (the standard library and :mod:`rnnlab.columns` only), so that the
configuration's loader and the run directory can both read a record (writing stored forms is
:func:`rnnlab.rundir.write_stored`)."""

from __future__ import annotations

import errno
from pathlib import Path


class StoredFileDamaged(RuntimeError):
    """A stored run file (``metrics.jsonl.cols.xz``, ``config.json.xz``, ...) does not decompress:
    damaged or truncated; the message names the file and the way to restore it (the CLI exits 1)."""


#: the suffix of a run file stored xz-compressed (records store ``config.json.xz``,
#: ``task.json.xz``, ``result.json.xz``: :attr:`rnnlab.rundir.RunFiles.COMPRESSED`); a live run directory
#: writes them plain
XZ = ".xz"
#: the suffix of a ``metrics.jsonl`` stored in columns (:mod:`rnnlab.columns`: keys once, values
#: as typed, byte-shuffled columns, xz-compressed), as records store it; a file the columns
#: cannot give back byte for byte, or a log of a few rows plain xz holds in fewer bytes, is
#: stored ``metrics.jsonl.xz`` instead
COLS = ".cols.xz"
#: the stored forms of a run file, by suffix, in the order :func:`stored` looks for them after
#: the plain name
STORED_SUFFIXES = (COLS, XZ)
#: the lzma preset records are written with, chosen for size. Measured on a fifth of the committed
#: records' metrics.jsonl and task.json (34.2 MB): presets 6 and 9 both give 5.63 MB (9's larger
#: dictionary pays only above 8 MiB a file; it took 4x the time and 7x the memory), 6 with the
#: extreme flag 5.64 MB
XZ_PRESET = 6


def plain_name(path: str | Path) -> Path:
    """A run file's plain name: ``run/metrics.jsonl`` for ``run/metrics.jsonl.cols.xz`` and
    ``run/metrics.jsonl.xz`` too."""
    path = Path(path)
    for suffix in STORED_SUFFIXES:
        if path.name.endswith(suffix):
            return path.with_name(path.name[: -len(suffix)])
    return path


def stored(path: str | Path) -> Path | None:
    """The file that holds ``path`` (a run file such as ``run/metrics.jsonl``, named plain or with
    a stored suffix, :data:`STORED_SUFFIXES`): ``path`` itself where it exists, else the first
    that exists of its plain name, ``+ .cols.xz`` and ``+ .xz``; None when none exists. Asked by
    its plain name, a run with several forms gives the plain file (a live run appends to it)."""
    path = Path(path)
    if path.exists():
        return path
    plain = plain_name(path)
    for other in (plain, *(plain.with_name(plain.name + suffix) for suffix in STORED_SUFFIXES)):
        if other.exists():
            return other
    return None


def _missing(path: str | Path) -> FileNotFoundError:
    plain = plain_name(path)
    forms = ", ".join([plain.name, *(plain.name + s for s in STORED_SUFFIXES)])
    return FileNotFoundError(errno.ENOENT, f"none of {forms} exists", str(plain))


def _damaged(where: Path, e: Exception) -> StoredFileDamaged:
    return StoredFileDamaged(
        f"{where} is damaged ({e}); restore it (`git checkout -- {where}` for a committed record), "
        f"or collect the run again from its run directory (`rnnlab reproduce collect RUNS_DIR -o RECORDS_DIR`)"
    )


def read_stored(path: str | Path) -> bytes:
    """The content of a run file, plain or stored (see :func:`stored`: xz-compressed, or for a
    ``metrics.jsonl`` in columns, given back byte for byte); the one reader of every form. A
    missing file is a ``FileNotFoundError`` naming the forms; a damaged or truncated stored file
    is a :class:`StoredFileDamaged` naming the file and the fix."""
    import lzma

    where = stored(path)
    if where is None:
        raise _missing(path)
    data = where.read_bytes()
    try:
        if where.name.endswith(COLS):
            from . import columns

            return columns.text(data)
        if where.name.endswith(XZ):
            return lzma.decompress(data)
    except (lzma.LZMAError, EOFError, ValueError) as e:  # columns.ColumnsError is a ValueError
        raise _damaged(where, e) from None
    return data
