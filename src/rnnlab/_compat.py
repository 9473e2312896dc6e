"""Names that moved to another module, still importable from their old one for one release.

A module that lost a public name lists it in a ``MOVED`` table and forwards its module
``__getattr__`` here: the old import path then works and warns with a DeprecationWarning
that says where the name lives now.
"""

from __future__ import annotations

import importlib
import warnings


def moved_attribute(module: str, moved: dict[str, str], name: str):
    """The value of a ``name`` listed in ``moved`` at its new home, with a DeprecationWarning;
    AttributeError for any other name, as Python raises it. ``moved`` maps an old name to its
    module now (``"rnnlab.stepper"``: the same name there) or to ``"module:qualified.name"``
    (``"rnnlab.rundir:RunFiles.RECORD"``)."""
    home = moved.get(name)
    if home is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    mod, _, qualname = home.partition(":")
    qualname = qualname or name
    warnings.warn(
        f"{module}.{name} moved to {mod}.{qualname}; use it from there "
        f"(the old path is deprecated and goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    value = importlib.import_module(mod)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value
