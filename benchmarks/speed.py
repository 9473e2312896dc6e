"""Speed benchmark of every registered cell against torch.nn.LSTM and the reference loop.

    python benchmarks/speed.py                 # all configurations (about 30-40 min on 2 cores)
    python benchmarks/speed.py --quick         # fewer repeats, the long row for expRNN/LSTM only
    python benchmarks/speed.py --configs copy mnist --cells exprnn scornn --json out.json

A record (--json) is refused when the machine is busy (load average above 0.5 per core),
unless --allow-load. See rnnlab/bench/speed.py for what is measured and how; BENCHMARKS.md for the
latest table.
"""

import argparse
import sys

from rnnlab.bench import speed

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    speed.add_arguments(p)
    a = p.parse_args()
    sys.exit(speed.main(**{k: getattr(a, k) for k in speed.OPTIONS}))
