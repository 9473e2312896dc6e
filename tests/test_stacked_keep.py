"""Kept stacks (StackedModel.keep_stacked): the members' parameters live as rows of one tensor per
parameter between steps. The forward pass and its gradients equal the path that stacks the
parameters every step (bit for bit), a parameter moved elsewhere is noticed, and a member's files
hold its own tensors only (rnnlab.train.own_memory), not the stacks."""

import io

import pytest
import torch

from conftest import tiny_copy
from rnnlab import config
from rnnlab import train as T
from rnnlab.ensemble import train_ensemble
from rnnlab.model import SequenceModel
from rnnlab.stacked_model import StackedModel
from rnnlab.stacked_optim import StackedStep


def _models(E=3, cell="lstm"):
    out = []
    for k in range(E):
        torch.manual_seed(k)
        out.append(SequenceModel(cell, 2, 3, 4).double())
    return out


def _grads(stacked, models, x):
    for m in models:
        m.zero_grad(set_to_none=True)
    out, _ = stacked.forward(models, x)
    (out * torch.linspace(0.5, 2, out.numel(), dtype=out.dtype).view(out.shape)).sum().backward()
    return out.detach(), [[p.grad.clone() for p in m.parameters()] for m in models]


@pytest.mark.parametrize("groups", [None, [[5, 1, 0], [2, 3, 4, 6, 7, 8, 9]]])
def test_kept_stacks_give_the_outputs_and_gradients_of_stacking_every_step(groups):
    models, x = _models(), torch.randn(3, 5, 7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    plain = StackedModel(models[0])
    out0, g0 = _grads(plain, models, x)
    kept = StackedModel(models[0])
    kept.keep_stacked(models, groups)
    assert kept.keeps(models) and not kept.keeps(models[::-1]) and not kept.keeps(models[:2])
    stacks = kept._kept[1]
    for j, stack in enumerate(stacks):  # each parameter is a row of its stack, the same object as before
        for k, m in enumerate(models):
            p = list(m.parameters())[j]
            assert p.data_ptr() == stack[k].data_ptr()
    out1, g1 = _grads(kept, models, x)
    assert torch.equal(out0, out1)
    for a, b in zip(g0, g1):
        assert all(torch.equal(u, v) for u, v in zip(a, b))
    # an optimizer step on a member's own parameter is what the next forward pass reads
    with torch.no_grad():
        next(models[1].parameters()).add_(0.25)
    out2, _ = _grads(kept, models, x)
    out3, _ = _grads(plain, models, x)
    assert torch.equal(out2, out3) and not torch.equal(out1[1], out2[1])


def test_a_parameter_moved_off_its_row_is_stacked_again():
    models = _models()
    x = torch.randn(3, 5, 7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    kept = StackedModel(models[0])
    kept.keep_stacked(models)
    p = next(models[2].parameters())
    p.data = p.data.clone() * 3  # elsewhere, with new values
    out, grads = _grads(kept, models, x)
    assert p.data_ptr() == kept._kept[1][0][2].data_ptr()  # on a row again, its values kept
    ref, ref_grads = _grads(StackedModel(models[0]), models, x)
    assert torch.equal(out, ref)
    assert all(torch.equal(u, v) for a, b in zip(grads, ref_grads) for u, v in zip(a, b))


def test_own_memory_copies_views_only_and_keeps_a_state_dicts_metadata():
    stack = torch.arange(12.0).view(3, 4)
    sd = _models(1)[0].state_dict()
    sd["row"], sd["whole"] = stack[1], stack
    out = T.own_memory({"model": sd, "carry": (stack[0], [stack[2]]), "n": 3})
    assert out["model"]._metadata == sd._metadata and type(out["model"]) is type(sd)
    assert out["model"]["whole"] is stack  # a tensor of its whole memory stays itself
    row = out["model"]["row"]
    assert torch.equal(row, stack[1]) and row.untyped_storage().nbytes() == 4 * 4
    assert out["carry"][0].untyped_storage().nbytes() == 16 and torch.equal(out["carry"][1][0], stack[2])
    buf = io.BytesIO()
    torch.save(out["carry"][0], buf)
    assert torch.load(io.BytesIO(buf.getvalue())).untyped_storage().nbytes() == 16


def test_an_ensembles_checkpoints_hold_each_members_own_tensors(tmp_path):
    cfg = config.load("demo/lstm", tiny_copy(steps=3, eval_every=3))
    train_ensemble(cfg, [0, 1, 2], tmp_path, progress=False)
    for k in range(3):
        for name in ("checkpoint.pt", "best.pt"):
            ck = torch.load(tmp_path / f"seed{k}" / name, weights_only=False)
            model = ck["model"] if name == "checkpoint.pt" else ck
            for key, t in model.items():
                assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), (k, name, key)


def test_a_members_parameter_hooks_run_on_its_row_of_the_gradient():
    """A hook on one member's parameter (``register_hook``, ``register_post_accumulate_grad_hook``)
    runs as it does when the parameters are stacked every step: the gradients are equal."""
    x = torch.randn(3, 5, 7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    grads, seen = [], []
    for keep in (False, True):
        models = _models()
        p = list(models[1].parameters())[1]
        p.register_hook(lambda g: g * 3)
        p.register_post_accumulate_grad_hook(lambda q: seen.append(q.grad.clone()))
        stacked = StackedModel(models[0])
        if keep:
            stacked.keep_stacked(models)
        grads.append(_grads(stacked, models, x)[1])
    assert all(torch.equal(u, v) for a, b in zip(*grads) for u, v in zip(a, b))
    assert len(seen) == 2 and torch.equal(seen[0], seen[1]) and torch.equal(seen[0], grads[0][1][1])


def _opt(m):
    decay = [p for n, p in m.named_parameters() if "weight" in n]
    rest = [p for n, p in m.named_parameters() if "weight" not in n]
    return torch.optim.Adam([{"params": rest, "lr": 0.01}, {"params": decay, "lr": 0.02, "weight_decay": 0.1}])


def test_the_stacked_step_on_kept_stacks_updates_them_in_place_as_the_gathered_step():
    """Kept in the optimizer groups' layout, the stacked step reads the parameters, gradients and
    Adam states where they are (no copies) and gives bit for bit the step that gathers them; the
    states it adopted are the optimizers' own (state_dict), and after a load_state_dict (a resume)
    it adopts the loaded ones."""
    x = torch.randn(3, 5, 7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    runs = []
    for keep in (False, True):
        models = _models()
        opts = [_opt(m) for m in models]
        stacked, step = StackedModel(models[0]), StackedStep.build(opts)
        if keep:
            index = {id(p): i for i, (_, p) in enumerate(models[0].named_parameters())}
            stacked.keep_stacked(models, [[index[id(p)] for p in g["params"]] for g in opts[0].param_groups])
        runs.append((models, opts, stacked, step))
    for t in range(4):
        if t == 2:  # a resume: the optimizers' states loaded anew (own tensors, not views of a stack)
            for _, opts, *_ in runs:
                for o in opts:
                    o.load_state_dict(T.own_memory(o.state_dict()))
        for models, opts, stacked, step in runs:
            _grads(stacked, models, x)
            norms = step.step(opts, [[p for g in o.param_groups for p in g["params"]] for o in opts], 0.5)
            assert norms is not None
    (m0, o0, *_), (m1, o1, _, step1) = runs
    for a, b in zip(m0, m1):
        assert all(torch.equal(u, v) for u, v in zip(a.parameters(), b.parameters()))
    for a, b in zip(o0, o1):
        sa, sb = a.state_dict(), b.state_dict()
        for k in sa["state"]:
            assert all(torch.equal(sa["state"][k][n], sb["state"][k][n]) for n in ("step", "exp_avg", "exp_avg_sq"))
    # kept in place: every member's parameters and states of a group lie in one (members, elements) tensor
    for g in range(2):
        ps = [p for o in o1 for p in o.param_groups[g]["params"]]
        assert step1._tiled((g, "param"), ps, 3) is not None
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert (
                step1._tiled((g, name), [o.state[p][name] for o in o1 for p in o.param_groups[g]["params"]], 3)
                is not None
            )


def test_members_states_split_from_the_stacked_state_as_indexing_would():
    from collections import namedtuple

    from torch.utils._pytree import tree_map

    from rnnlab.ensemble import _unstack

    HC = namedtuple("HC", "h c")
    a, b = torch.randn(3, 2, 4), torch.randn(3, 1, 5)
    assert _unstack(None, 3) == [None, None, None]
    for state in (a, (a, b), HC(a, b), [a, (b,)]):
        parts = _unstack(state, 3)
        assert len(parts) == 3
        for j, part in enumerate(parts):
            expect = tree_map(lambda t, j=j: t[j], state)
            assert type(part) is type(expect)
            assert tree_map(lambda u, v: torch.equal(u, v), part, expect) == tree_map(lambda _: True, expect)
