"""rnnlab: long-memory recurrent neural networks in PyTorch.

``import rnnlab`` is cheap (torch is not imported yet): the public names below load their
module on first use, so ``rnnlab --help`` and the file-only commands start quickly.
"""

__version__ = "0.3.0"

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
)
_TASKS = ("TASKS", "AddingTask", "Batch", "CopyTask", "Task")
_RUNS = ("load_run",)
_STEPPER = ("Stepper",)


def _submodules() -> tuple[str, ...]:
    import pkgutil

    return tuple(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


#: the public names, then the modules (listed so that documentation tools walk them all)
__all__ = [*_CELLS, *_TASKS, *_RUNS, *_STEPPER, "__version__", *_submodules()]


def __getattr__(name: str):
    if name in _CELLS:
        from . import cells as module
    elif name in _TASKS:
        from . import tasks as module
    elif name in _RUNS:
        from . import rundir as module
    elif name in _STEPPER:
        from . import stepper as module
    elif name in _submodules():
        from importlib import import_module

        return import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'rnnlab' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
