#!/usr/bin/env bash
# The GPU checks in one prepared run, for the day a CUDA GPU is available (docs/device.md).
#
#   benchmarks/gpu_check.sh [--dry-run] [--out FILE] [--only STEPS] [--python PY]
#
# On a machine with CUDA (torch.cuda.is_available()), three steps, each under a time limit so
# that the whole run stays under 8 minutes on an H200-class GPU:
#   tests   the GPU tests: tests/test_device.py (every cell's fast path, a short training run and
#           checkpoints on cuda), tests/kernels/test_triton_guard.py (the guard, and the real kernel on
#           CUDA in automatic mode), tests/kernels/test_triton_kernel.py                    (limit 120 s)
#   doctor  rnnlab doctor --device cuda --kernel-table: every fast path against its reference,
#           the Triton kernel forward and backward, a training step per cell family, and the
#           kernel's registers, spills and time against the fused loop for H = 32 ... 256  (190 s)
#   speed   rnnlab bench speed --device cuda --configs copy mnist --quick --cells asrnn exprnn
#           lstm --allow-load: the speed table against cuDNN's LSTM (nn.LSTM rows; the record,
#           marked loaded if the host was busy, in speed-cuda.json beside --out)          (150 s)
# Everything printed goes to the terminal and to --out (default gpu-check.md), a Markdown file
# whose sections can be pasted into BENCHMARKS.md. The exit code is 0 only if every step
# passed (a step that ran out of time counts as failed; what it printed is kept).
#
# --dry-run, or a machine without CUDA: the CPU-side checks of the same steps, so the script is
# tested without a GPU: tests = the Triton interpreter and doctor tests, doctor = rnnlab doctor
# --device cpu --quick, speed = the GPU speed command's arguments parsed (nothing timed).
# --only STEPS: a comma-separated subset of tests,doctor,speed (default: all three).
# --python PY: the interpreter with rnnlab installed (default: .venv/bin/python if present).
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "gpu_check.sh: $1" >&2; echo "usage: benchmarks/gpu_check.sh [--dry-run] [--out FILE] [--only STEPS] [--python PY] (--help)" >&2; exit 2; }

cd "$(dirname "$0")/.." || exit 2
DRY=0
OUT=gpu-check.md
ONLY=tests,doctor,speed
PY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --out) [ $# -ge 2 ] || die "--out needs a file name, e.g. --out gpu-check.md"; OUT="$2"; shift ;;
    --only) [ $# -ge 2 ] || die "--only needs steps, e.g. --only doctor,speed"; ONLY="$2"; shift ;;
    --python) [ $# -ge 2 ] || die "--python needs an interpreter, e.g. --python .venv/bin/python"; PY="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1'" ;;
  esac
  shift
done
IFS=',' read -r -a STEPS <<< "$ONLY"
[ ${#STEPS[@]} -gt 0 ] || die "--only '$ONLY' names no step; expected some of tests,doctor,speed"
for s in "${STEPS[@]}"; do
  case "$s" in tests|doctor|speed) ;; *) die "unknown step '$s' in --only; expected some of tests,doctor,speed" ;; esac
done
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
# one interpreter start for what the header needs (importing torch takes seconds)
INFO=$("$PY" -c '
import importlib.metadata as m, platform, torch
from rnnlab.device import cpu_model
try:
    triton = m.version("triton")
except m.PackageNotFoundError:
    triton = "not installed"
print(int(torch.cuda.is_available()))
print(f"python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda}, triton {triton}")
print(cpu_model())
' 2>/dev/null) || die "'$PY' cannot import rnnlab and torch; pass --python, e.g. --python .venv/bin/python"
mkdir -p "$(dirname "$OUT")" 2>/dev/null
: > "$OUT" || die "cannot write '$OUT'"
OUTDIR=$(cd "$(dirname "$OUT")" && pwd)

CUDA=0
if [ "$DRY" = 0 ] && [ "$(sed -n 1p <<< "$INFO")" = 1 ]; then
  CUDA=1
fi

log() { printf '%s\n' "$*" | tee -a "$OUT"; }

log "# GPU check ($(date -u '+%Y-%m-%d %H:%M UTC'))"
log ""
log "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
log "- $(sed -n 2p <<< "$INFO")"
if [ "$CUDA" = 1 ]; then
  log "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || echo unknown)"
  log "- mode: on the GPU"
else
  why=$([ "$DRY" = 1 ] && echo "--dry-run" || echo "no CUDA device (torch.cuda.is_available() is False)")
  log "- mode: dry run ($why): the CPU-side checks only; no GPU figure comes from this run"
fi
log "- CPU: $(sed -n 3p <<< "$INFO"), $(nproc 2>/dev/null || echo '?') cores"

FAILED=()
# step NAME LIMIT_SECONDS COMMAND...: run it, its output to the terminal and $OUT, under a limit
# (SHOW, if set, is the command line written in the heading instead of the one run)
step() {
  local name="$1" limit="$2"
  shift 2
  log ""
  log "## $name"
  log ""
  log "\`${SHOW:-$*}\` (limit ${limit} s)"
  log ""
  log '```'
  local start=$SECONDS
  timeout --signal=INT --kill-after=20 "$limit" "$@" 2>&1 | tee -a "$OUT"
  local rc=${PIPESTATUS[0]}
  log '```'
  local took=$((SECONDS - start))
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    log "**$name: ran out of its ${limit} s** (exit $rc, ${took} s); the output above is what it printed"
    FAILED+=("$name (time)")
  elif [ "$rc" != 0 ]; then
    log "**$name: exit $rc** (${took} s)"
    FAILED+=("$name (exit $rc)")
  else
    log "$name: passed (${took} s)"
  fi
}

# --allow-load: a lent GPU is one chance; a host busier than rnnlab.bench.benchrecord's limit still
# records, and the record says it was loaded
SPEED_ARGS=(bench speed --device cuda --configs copy mnist --quick --cells asrnn exprnn lstm --allow-load
            --json "$OUTDIR/speed-cuda.json")
for s in "${STEPS[@]}"; do
  case "$s:$CUDA" in
    tests:1)
      step "GPU tests" 120 "$PY" -m pytest -q -rs -p no:cacheprovider \
        tests/test_device.py tests/kernels/test_triton_guard.py tests/kernels/test_triton_kernel.py ;;
    tests:0)
      step "CPU-side tests (Triton interpreter, doctor)" 400 "$PY" -m pytest -q -rs -p no:cacheprovider \
        tests/kernels/test_triton_guard.py tests/kernels/test_triton_kernel.py tests/bench/test_doctor.py ;;
    doctor:1)
      step "rnnlab doctor --device cuda" 190 "$PY" -m rnnlab.cli doctor --device cuda --kernel-table -v ;;
    doctor:0)
      step "rnnlab doctor --device cpu --quick" 300 "$PY" -m rnnlab.cli doctor --device cpu --quick -v ;;
    speed:1)
      step "speed table against cuDNN's LSTM" 150 "$PY" -m rnnlab.cli "${SPEED_ARGS[@]}" ;;
    speed:0)
      SHOW="rnnlab ${SPEED_ARGS[*]}  (parsed, not run)" step "speed command (arguments only; nothing timed)" 60 "$PY" -c \
        "import sys; from rnnlab.cli import build_parser; a = build_parser().parse_args(sys.argv[1:]); \
print('parsed:', a.command, a.bench, 'device', a.device, 'configs', a.configs, 'cells', a.cells, 'quick', a.quick, 'allow_load', a.allow_load, 'json', a.json)" \
        "${SPEED_ARGS[@]}" ;;
  esac
done

log ""
if [ ${#FAILED[@]} -eq 0 ]; then
  log "All ${#STEPS[@]} step(s) passed; written to $OUT."
  exit 0
fi
log "Failed: ${FAILED[*]}; written to $OUT."
exit 1
