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
_os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

_CELLS = (
    "ASRNN",
    "CELLS",
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
