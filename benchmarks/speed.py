"""Speed benchmark of every registered cell against torch.nn.LSTM and the reference loop.

    python benchmarks/speed.py                 # all configurations (about 15-30 min on 2 cores)
    python benchmarks/speed.py --quick         # fewer repeats, the long row for expRNN/LSTM only
    python benchmarks/speed.py --configs copy mnist --cells exprnn scornn --json out.json

See rnnlab/speed.py for what is measured and how; BENCHMARKS.md for the latest table.
"""

import argparse
import json
import sys

from rnnlab import speed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+", default=list(speed.CONFIGS), choices=list(speed.CONFIGS))
    p.add_argument("--cells", nargs="+", default=None, help="cell labels (default: every registered cell)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--malloc", choices=("tuned", "default"), default="tuned",
                   help="tuned: glibc told not to mmap or trim (rnnlab.runtime.tune_malloc); default: glibc as is")
    p.add_argument("--json", default=None, help="also write the raw results here")
    a = p.parse_args(argv)
    result = speed.run(a.configs, a.cells, a.quick, a.threads, a.malloc, log=lambda s: print(s, file=sys.stderr, flush=True))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    c = result["conditions"]
    print(f"\n{c['date']}; {c['machine']}; torch {c['torch']}; threads {c['threads']}; malloc {c['malloc']}; "
          f"load average at the end {c['loadavg_end'][0]:.2f}\n")
    print(speed.format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
