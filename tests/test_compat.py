"""Names that moved to another module (rnnlab._compat): each still imports from its old
module for one release, warns with a DeprecationWarning naming its new home, and is the very
object that lives there; a name that never existed still raises AttributeError."""

import importlib

import pytest

from rnnlab import evaluation, rundir, stacked_model, stepper
from rnnlab.cells import CELLS
from rnnlab.cells.base import batched_paths

MOVED = [
    ("rnnlab.train", "build_optimizer", lambda: stepper.build_optimizer, "rnnlab.stepper.build_optimizer"),
    ("rnnlab.train", "eval_data", lambda: evaluation.eval_data, "rnnlab.evaluation.eval_data"),
    ("rnnlab.train", "split_metrics", lambda: evaluation.split_metrics, "rnnlab.evaluation.split_metrics"),
    ("rnnlab.train", "add_metric_sums", lambda: evaluation.add_metric_sums, "rnnlab.evaluation.add_metric_sums"),
    ("rnnlab.ledger.document", "RECORD_FILES", lambda: rundir.RunFiles.RECORD, "rnnlab.rundir.RunFiles.RECORD"),
    ("rnnlab.cli", "RECORD_FILES", lambda: rundir.RunFiles.RECORD, "rnnlab.rundir.RunFiles.RECORD"),
    ("rnnlab.ensemble", "batched_template", lambda: stacked_model.batched_template, "rnnlab.stacked_model"),
    ("rnnlab.ensemble", "AUTOCAST_PRODUCTS", lambda: stacked_model.AUTOCAST_PRODUCTS, "rnnlab.stacked_model"),
    ("rnnlab.ensemble", "EVAL_ELEMENTS", lambda: stacked_model.EVAL_ELEMENTS, "rnnlab.stacked_model"),
]


@pytest.mark.parametrize("module,name,new,where", MOVED, ids=[f"{m}.{n}" for m, n, *_ in MOVED])
def test_a_moved_name_imports_from_its_old_module_with_a_warning(module, name, new, where):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=where.replace(".", r"\.")):
        old = getattr(mod, name)
    assert old is new()
    assert name not in getattr(mod, "__all__", ())  # star-imports do not trigger the warning


def test_the_cells_batched_paths_replace_the_ensembles_table():
    import rnnlab.ensemble as ens

    with pytest.warns(DeprecationWarning, match="batched_sequence"):
        table = ens.VMAP_PATHS
    assert table == batched_paths(CELLS.values()) and len(table) == 11  # 8 + minGRU/minLSTM, sLSTM, mLSTM
    assert all(callable(v) for v in table.values())


@pytest.mark.parametrize("module", ["rnnlab.train", "rnnlab.ensemble", "rnnlab.ledger.document", "rnnlab.cli"])
def test_an_unknown_name_is_still_an_attribute_error(module):
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = importlib.import_module(module).no_such_name
