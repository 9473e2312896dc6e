"""rnnlab: long-memory recurrent neural networks in PyTorch.

``import rnnlab`` is cheap (torch is not imported yet): the public names below load their
module on first use, so ``rnnlab --help`` and the file-only commands start quickly.
"""

__version__ = "0.3.0"

import os as _os

# Intel MKL, torch's BLAS on x86 CPUs, may round a product differently depending on where its
# operands sit in memory (measured: the weight gradients of a 5-unit RNN, one batched product
# per member, differed at the last float32 bit between members at different offsets of one
# buffer), so a resumed run or an ensemble member could drift from its uninterrupted twin by
# chance. Strict conditional numerical reproducibility removes that, at no cost measurable in
# docs/speed.md's products. MKL reads the setting at its first call, so it is set here, before
# torch is imported by rnnlab; a value the user set is kept (docs/runs.md, "Reproducibility").
# Child processes inherit it; it cannot be taken back out, since MKL may make its first call
# at any time after this import (docs/runs.md says so, and how to start a child without it).
_os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

_CELLS = (
    "ASRNN",
    "CELLS",
    "register_cell",
    "DMU",
    "GRU",
    "IRNN",
    "LSTM",
    "LTRNN",
    "NNRNN",
    "RHN",
    "RNN",
    "SCORNN",
    "ASRNNCell",
    "Cell",
    "DMUCell",
    "ExpRNN",
    "ExpRNNCell",
    "GRUCell",
    "IRNNCell",
    "LSTMCell",
    "LTRNNCell",
    "NNRNNCell",
    "Recurrent",
    "RHNCell",
    "RNNCell",
    "SCORNNCell",
    "EURNN",
    "EURNNCell",
    "URNN",
    "URNNCell",
    "unroll",
    "from_torch",
    "to_torch",
    "export_onnx",
    "ThreadsWarning",
    "MomentumLSTM",
    "MomentumLSTMCell",
    "FCURNN",
    "FCURNNCell",
    "SoftOrthRNN",
    "SoftOrthRNNCell",
    "KRU",
    "KRUCell",
    "AntisymmetricRNN",
    "AntisymmetricRNNCell",
    "IncrementalRNN",
    "IncrementalRNNCell",
    "NAISNet",
    "NAISNetCell",
    "LipschitzRNN",
    "LipschitzRNNCell",
    "CoRNN",
    "CoRNNCell",
    "LEM",
    "LEMCell",
    "MinGRU",
    "MinGRUCell",
    "MinLSTM",
    "MinLSTMCell",
    "SLSTM",
    "SLSTMCell",
    "MLSTM",
    "MLSTMCell",
    "LRU",
    "LRUCell",
    "S4D",
    "S4DCell",
    "Mamba",
    "MambaCell",
)
#: the library's other public names, by the module that defines them
_LIBRARY = {
    "tasks": ("TASKS", "AddingTask", "Batch", "CopyTask", "Task", "build_task"),
    "model": ("SequenceModel", "Seq2Seq", "build_model"),
    "config": ("RunConfig", "ConfigError"),
    "train": ("Trainer", "TrainingDiverged", "evaluate"),
    "ensemble": ("train_ensemble",),
    "stepper": ("Stepper",),
    "rundir": ("load_run", "RunFiles", "is_finished"),
    "results": ("find_results", "summarize", "export_csv"),
}
_HOME = {name: module for module, names in _LIBRARY.items() for name in names}


def _submodules() -> tuple[str, ...]:
    import pkgutil

    return tuple(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


#: the library's public names (cells, tasks, the model, configuration, training, runs and their
#: results); the modules themselves (``rnnlab.train``, ``rnnlab.bench``, ...) are attributes too,
#: imported on first use, but not listed (documentation tools walk them from the package)
__all__ = [*_CELLS, *_HOME, "__version__"]


#: modules that moved, by their old name under ``rnnlab``: the old name still imports them
#: (``from rnnlab import speed``, ``import rnnlab.speed``, ``python -m rnnlab.docsync``) with a
#: DeprecationWarning until the next release
_MOVED = {
    "speed": "rnnlab.bench.speed",
    "ensemble_bench": "rnnlab.bench.ensemble_bench",
    "small_bench": "rnnlab.bench.small_bench",
    "benchrecord": "rnnlab.bench.benchrecord",
    "benchdocs": "rnnlab.bench.benchdocs",
    "doctor": "rnnlab.bench.doctor",
    "docsync": "rnnlab.bench.docsync",
    "reproduce": "rnnlab.ledger",
}


def _moved(name: str, stacklevel: int = 3):
    """The module ``rnnlab.<name>`` moved to, with a DeprecationWarning naming its new place."""
    import warnings
    from importlib import import_module

    new = _MOVED[name]
    warnings.warn(
        f"rnnlab.{name} moved to {new}; import it from there (the old name goes in the next release)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return import_module(new)


class _MovedLoader:
    """Loads an old module name as the module at its new place (the same module object)."""

    def __init__(self, name: str):
        self.name = name

    def create_module(self, spec):
        return _moved(self.name, stacklevel=3)  # importlib's own frames are not counted

    def exec_module(self, module) -> None:
        pass

    def is_package(self, fullname: str) -> bool:
        return False

    def get_code(self, fullname: str):
        """``python -m rnnlab.<old name>``: runs the new module as the main one."""
        new = _MOVED[self.name]
        return compile(
            "import runpy, warnings\n"
            f"warnings.warn({f'python -m {fullname} is now python -m {new}'!r}, DeprecationWarning)\n"
            f"runpy.run_module({new!r}, run_name='__main__', alter_sys=True)\n",
            fullname,
            "exec",
        )


class _MovedFinder:
    """Finds ``rnnlab.<old name>`` of a moved module (see ``_MOVED``) on ``sys.meta_path``."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in _MOVED:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, _MovedLoader(name))


def _install_finder() -> None:
    import sys

    if not any(isinstance(f, type) and f.__name__ == "_MovedFinder" for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder)


_install_finder()


def __getattr__(name: str):
    if name in _MOVED:
        module = _moved(name)
        globals()[name] = module  # warned once: ``from rnnlab import x`` looks the name up twice
        return module
    home = "cells" if name in _CELLS else _HOME.get(name)
    if home == "cells":
        from . import cells as module
    elif home == "tasks":
        from . import tasks as module
    elif home == "model":
        from . import model as module
    elif home == "config":
        from . import config as module
    elif home == "train":
        from . import train as module
    elif home == "ensemble":
        from . import ensemble as module
    elif home == "stepper":
        from . import stepper as module
    elif home == "rundir":
        from . import rundir as module
    elif home == "results":
        from . import results as module
    elif name in _submodules():
        from importlib import import_module

        return import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'rnnlab' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_submodules()))
