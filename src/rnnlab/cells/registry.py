"""Where a cell name comes from: the built-in cells, cells registered in Python, cells named by
import path, and cells that installed packages declare (docs/own-cell.md).

``model.cell`` is looked up, in this order:

1. a key of :data:`rnnlab.CELLS`: the built-in cells and those added with :func:`register_cell`
   (in this process only: a pool worker or Ray task does not see them; name the cell by path
   or entry point there);
2. ``"package.module:ClassName"`` (imported by module path) or ``"path/to/file.py:ClassName"``
   (the file imported by its location, relative to the current directory); the run records the
   string, so ``--resume``, ``rnnlab analyze`` and the ledger import it again;
3. an entry point of the group ``rnnlab.cells`` of an installed distribution
   (``[project.entry-points."rnnlab.cells"] mycell = "mypackage.cells:MyCell"``), read only
   when a name is not found above and by ``rnnlab list``, never when rnnlab is imported.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
import traceback
from pathlib import Path

#: the entry-point group through which installed packages offer cells
ENTRY_POINT_GROUP = "rnnlab.cells"

_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")


class UnknownCell(ValueError):
    """A cell name or path that names no cell class; the message says why and what to do.
    ``choices``: the known cell names, where the name was not a path."""

    def __init__(self, message: str, choices: list[str] | None = None):
        super().__init__(message)
        self.choices = choices or []


def _cell_base():
    from .base import Cell

    return Cell


def _check_class(obj, spec: str, where: str) -> type:
    Cell = _cell_base()
    if not (isinstance(obj, type) and issubclass(obj, Cell)):
        raise UnknownCell(
            f"model.cell = {spec!r} ({where}) is {type(obj).__name__} {getattr(obj, '__name__', '')!r}, not a subclass of rnnlab.cells.Cell; derive the cell "
            f"from rnnlab.cells.Cell (docs/own-cell.md)"
        )
    return obj


def _import_file(path: str, spec: str):
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise UnknownCell(
            f"model.cell = {spec!r}: no file {file}; give the path of the .py file that defines the "
            f"cell (relative to the current directory), or an importable module as package.module:Class"
        )
    stem = re.sub(r"\W", "_", file.stem)
    name = f"rnnlab_user_cells.{stem}_{hashlib.sha1(str(file).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module  # before executing: dataclasses and pickling look it up
    try:
        loader_spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        del sys.modules[name]
        raise UnknownCell(f"model.cell = {spec!r}: {_import_failure(str(file), e)}") from None
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import_failure(what: str, e: BaseException) -> str:
    """One line for a plug-in (a cell's file, module or entry point) that raised ``e`` while
    importing: what failed, where, and the fix."""
    if isinstance(e, ModuleNotFoundError) and e.name:
        return (
            f"importing {what} failed: it imports {e.name!r}, which is not installed; install it "
            f"(pip install ...) in this environment, or remove the import"
        )
    if isinstance(e, SyntaxError):
        where = f"{e.filename}, line {e.lineno}" if e.filename else what
        return f"importing {what} failed: {type(e).__name__}: {e.msg} ({where}); fix the file"
    frames = traceback.extract_tb(e.__traceback__)
    last = frames[-1] if frames else None
    where = f" ({Path(last.filename).name}, line {last.lineno})" if last else ""
    first = str(e).splitlines()[0] if str(e) else ""
    return (
        f"importing {what} failed: {type(e).__name__}{': ' + first if first else ''}{where}; fix it "
        f"(importing it in Python shows the whole traceback)"
    )


def import_cell(spec: str) -> type:
    """The cell class named by ``"package.module:ClassName"`` or ``"file.py:ClassName"``; a
    one-line :class:`UnknownCell` naming the module and the missing name otherwise."""
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise UnknownCell(f"model.cell = {spec!r} is not of the form package.module:ClassName")
    if module_name.endswith(".py"):
        module = _import_file(module_name, spec)
    else:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            missing = e.name or module_name
            if not (module_name == missing or module_name.startswith(missing + ".")):  # a dependency
                raise UnknownCell(f"model.cell = {spec!r}: {_import_failure(f'module {module_name!r}', e)}") from None
            raise UnknownCell(
                f"model.cell = {spec!r}: cannot import module {module_name!r} (no module named {missing!r}); "
                f"install its package, or add the folder that holds it to PYTHONPATH"
            ) from None
        except (Exception, SystemExit) as e:
            raise UnknownCell(f"model.cell = {spec!r}: {_import_failure(f'module {module_name!r}', e)}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(module) if not n.startswith("_"))
            raise UnknownCell(
                f"model.cell = {spec!r}: module {module_name!r} has no name {attr!r} "
                f"(it defines: {', '.join(public[:12])}{', ...' if len(public) > 12 else ''})"
            )
        obj = getattr(obj, part)
    return _check_class(obj, spec, f"from module {module_name!r}")


def entry_points() -> dict:
    """``{name: entry point}`` of the group :data:`ENTRY_POINT_GROUP` of the installed
    distributions (read from their metadata each call: nothing is imported)."""
    from importlib import metadata

    try:
        found = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10 has no selection by group
        found = metadata.entry_points().get(ENTRY_POINT_GROUP, [])
    return {ep.name: ep for ep in found}


def _from_entry_point(name: str):
    ep = entry_points().get(name)
    if ep is None:
        return None
    try:
        obj = ep.load()
    except (ImportError, AttributeError) as e:
        if isinstance(e, ModuleNotFoundError) and e.name and not ep.value.startswith(e.name):
            why = _import_failure(f"module {ep.value.partition(':')[0]!r}", e)  # a dependency
        else:
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; reinstall the package that declares it"
        raise UnknownCell(
            f"cell {name!r} (entry point {ep.value!r} of group {ENTRY_POINT_GROUP!r}) does not load: {why}"
        ) from None
    except (Exception, SystemExit) as e:  # a broken plug-in: one line, only where it is used
        why = _import_failure(f"module {ep.value.partition(':')[0]!r}", e)
        raise UnknownCell(
            f"cell {name!r} (entry point {ep.value!r} of group {ENTRY_POINT_GROUP!r}) does not load: {why}"
        ) from None
    return _check_class(obj, ep.value, f"entry point {name!r}")


class CellRegistry(dict):
    """``rnnlab.CELLS``: the registered cells by key (a dict), which also resolves a
    ``"module:Class"`` path and an installed entry point on lookup (``in``, ``[]``, ``get``)
    without adding them to its keys."""

    def __init__(self, cells: dict):
        super().__init__(cells)
        #: the keys rnnlab ships (the others were registered in this process)
        self.builtin = frozenset(cells)
        self._builtin = dict(cells)

    def resolve(self, name: str) -> type:
        """The cell class of ``name`` (see the module docstring), else :class:`UnknownCell`."""
        if not isinstance(name, str):
            raise UnknownCell(f"model.cell must be a string (a cell key or package.module:Class), got {name!r}")
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        if ":" in name:
            return import_cell(name)
        cls = _from_entry_point(name)
        if cls is not None:
            return cls
        known = sorted({*self, *entry_points()})
        raise UnknownCell(
            f"unknown cell {name!r}; registered cells: {known}. A cell of your own: rnnlab.register_cell(name, "
            f"cls), or model.cell = 'package.module:ClassName' (docs/own-cell.md)",
            choices=known,
        )

    def __setitem__(self, name, cls) -> None:
        if name in self.builtin and dict.get(self, name) is not cls:
            # a run records its cell by name: tables, the ledger and every other process
            # (evaluate, a pool worker) would read this cell as the built-in one
            raise ValueError(
                f"cell name {name!r} is the built-in {self._builtin[name].__name__} (runs, tables and the "
                f"ledger take the name for it); register {getattr(cls, '__name__', cls)} under a name of its "
                f"own, e.g. register_cell({name + '-mine'!r}, {getattr(cls, '__name__', 'cls')})"
            )
        dict.__setitem__(self, name, cls)

    def __delitem__(self, name) -> None:
        if name in self.builtin:
            raise ValueError(f"cell name {name!r} is a built-in cell; it cannot be removed")
        dict.__delitem__(self, name)

    def __missing__(self, name):
        try:
            return self.resolve(name)
        except UnknownCell as e:
            raise KeyError(str(e)) from None

    def __contains__(self, name) -> bool:
        try:
            self.resolve(name)
        except UnknownCell:
            return False
        return True

    def get(self, name, default=None):
        try:
            return self.resolve(name)
        except UnknownCell:
            return default

    def register(self, name: str, cls: type, *, replace: bool = False) -> type:
        """``rnnlab.register_cell(name, cls)``: make ``cls`` (a subclass of
        :class:`rnnlab.cells.Cell`) available as ``model.cell = name`` in this process; returns
        ``cls``. A name registered before in this process needs ``replace=True``; the name of a
        built-in cell is refused (runs record their cell by name, so another cell under it would
        read as the built-in one in tables, the ledger and other processes).

        >>> import rnnlab
        >>> class Tiny(rnnlab.RNNCell):
        ...     pass
        >>> rnnlab.register_cell("tiny-doc", Tiny) is Tiny and rnnlab.CELLS["tiny-doc"] is Tiny
        True
        >>> del rnnlab.CELLS["tiny-doc"]
        """
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"cell name {name!r} must be lowercase letters, digits, '-' or '_', starting with a letter "
                f"(a name with ':' would read as an import path)"
            )
        _check_class(cls, name, "given to register_cell")
        if dict.__contains__(self, name) and self[name] is not cls and not replace:
            raise ValueError(
                f"cell name {name!r} is taken by {self[name].__module__}.{self[name].__name__}; choose "
                f"another name, or pass replace=True to replace it"
            )
        self[name] = cls
        return cls

    def available(self) -> dict[str, str]:
        """Every cell name ``rnnlab list`` shows: ``{name: where it comes from}`` (``"rnnlab"``,
        the registering module, or ``entry point module:Class``), entry points loaded lazily."""
        out = {k: getattr(c, "__module__", "?") for k, c in self.items()}
        for name, ep in entry_points().items():
            out.setdefault(name, f"entry point {ep.value}")
        return out
