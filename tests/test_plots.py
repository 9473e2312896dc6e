"""Plot legends name each run so that two curves never share an entry: the run's name, its seed
where several runs share the name, its directory where name and seed repeat."""

from __future__ import annotations

import json

from rnnlab.plots import legend_labels, plot_curves


def _run(d, name, seed, losses):
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({"name": name, "seed": seed, "baseline": {"loss": 1.0}}))
    (d / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i, "val/loss": v}) + "\n" for i, v in enumerate(losses))
    )
    return d


def test_legend_labels_are_unique_and_say_the_seed(tmp_path):
    a0 = _run(tmp_path / "lstm" / "seed0", "lstm", 0, [1, 0.5])
    a1 = _run(tmp_path / "lstm" / "seed1", "lstm", 1, [1, 0.4])
    b = _run(tmp_path / "gru" / "seed0", "gru", 0, [1, 0.3])
    c0 = _run(tmp_path / "lstm-steps=9-abc" / "seed0", "lstm", 0, [1, 0.2])  # another configuration
    dirs = [a0, a1, b, c0]
    from rnnlab.plots import _result

    labels = legend_labels(dirs, [_result(d) for d in dirs])
    assert labels[1] == "lstm (seed 1)" and labels[2] == "gru"
    assert labels[0] == "lstm (seed 0) [lstm/seed0]" and labels[3] == "lstm (seed 0) [lstm-steps=9-abc/seed0]"
    assert len(set(labels)) == len(labels)
    assert legend_labels([a0, b], [_result(a0), _result(b)]) == ["lstm", "gru"]  # no seed where none repeats
    assert plot_curves(dirs, tmp_path / "c.png", "val/loss").stat().st_size > 1000
