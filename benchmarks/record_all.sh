#!/usr/bin/env bash
# Re-make every timing record of BENCHMARKS.md, docs/speed.md and docs/sweeps.md on an idle
# machine, then regenerate the docs from them. About 150 minutes on 2 idle cores.
#
#   benchmarks/record_all.sh REPOS        # REPOS: the four reference repositories (papers_code.py)
#   PYTHON=.venv/bin/python benchmarks/record_all.sh REPOS
#
# Every command refuses to write its record when the 1-minute load average is above 0.5 per
# core (rnnlab.bench.benchrecord); a refused run keeps its measurements in RECORD.loaded and this
# script stops. Between commands it waits until the load left by the previous one (about 1.0
# for a single-thread benchmark) has decayed below the limit.
set -euo pipefail
cd "$(dirname "$0")/.."
REPOS=${1:?usage: benchmarks/record_all.sh REPOS (the directory holding asRNN/, nnRNN_release/, expRNN/, dmu/)}
PY=${PYTHON:-python}
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}

settle() {  # wait (at most 10 min) for the 1-minute load average to fall below 0.4 per core
    for _ in $(seq 120); do
        if "$PY" -c "import os, sys; sys.exit(os.getloadavg()[0] >= 0.4 * os.cpu_count())"; then return 0; fi
        sleep 5
    done
    echo "the machine did not become idle: $(uptime)" >&2
    return 1
}

run() { settle; echo "== $(date -u +%H:%M:%S) $*" >&2; "$@"; }

S=benchmarks/speed.py
run "$PY" $S --configs copy mnist ptb long long-last --json docs/speed-results-main.json          # ~90 min
run "$PY" $S --configs copy mnist ptb --cells gru "gru native" --json docs/speed-results-gru.json  # ~5 min
run "$PY" $S --configs copy mnist ptb --cells fcurnn --json docs/speed-results-fcurnn.json         # ~5 min
run "$PY" $S --configs copy mnist --cells rnn irnn ltrnn --json docs/speed-results-rnn-bias.json  # ~3 min
run "$PY" $S --configs ptb --cells exprnn asrnn nnrnn --json docs/speed-results-ptb-expm.json     # ~6 min
run "$PY" $S --configs ptb mnist-n257 mnist-n364 mnist-n512 --cells asrnn exprnn scornn nnrnn "nn.LSTM" \
    --json docs/speed-results-large.json                                                          # ~20 min
run "$PY" $S --configs copy --threads 2 --cells asrnn exprnn scornn nnrnn dmu rhn \
    --json docs/speed-results-copy-2threads.json                                                  # ~3 min
run "$PY" $S --configs long-last --malloc default --json docs/speed-results-long-last-default-malloc.json  # ~8 min
run "$PY" benchmarks/papers_code.py "$REPOS" --json docs/papers-code.json \
    --note "repositories: asRNN 0b27d67, nnRNN_release 294d4ff, expRNN 830ec83, dmu d4d7a8e"       # ~2 min
run "$PY" benchmarks/backend_overhead.py --out docs/backend-overhead.json                         # ~1 min
run "$PY" benchmarks/scan.py --json docs/scan-results.json                                        # ~1 min
run "$PY" benchmarks/allocator.py --json docs/allocator-results.json                              # ~3 min
run "$PY" benchmarks/denormals.py --json docs/denormals-results.json                              # ~8 min
"$PY" -m rnnlab.bench.docsync BENCHMARKS.md docs/speed.md docs/sweeps.md docs/guide.md
echo "done: now run tests/bench/test_benchdocs.py (every block equals its record; any record still listed in its LEGACY leaves it)" >&2
