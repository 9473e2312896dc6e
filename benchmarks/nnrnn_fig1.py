"""Reproduce the nnRNN paper's Fig. 1(b) (transient dynamics) and Fig. 1(c) (Fisher memory
curves) and print the table of areas under the curves.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/nnrnn_fig1.py [OUT_DIR]
"""

import sys

from rnnlab.analysis.fisher import write_fig1

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "docs/nnrnn"
    print(write_fig1(out))
