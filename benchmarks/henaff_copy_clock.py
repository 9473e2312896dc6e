"""Success of Henaff et al.'s explicit "clock" solution of the copy task against the number of
symbols K and the alphabet size, the analogue of their Fig. 1 (T = 500, d = 128, 500 trials).

    python benchmarks/henaff_copy_clock.py [--trials 500] [--d 128] [--L 500]

Prints a Markdown table (fraction of trials whose K symbols are all recalled).
"""

import argparse

from rnnlab.constructions import copy_success_table


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--L", type=int, default=500)
    args = ap.parse_args()
    rows = copy_success_table(d=args.d, L=args.L, Ks=(5, 10, 20, 40), alphabets=(8, 32, 128), trials=args.trials)
    alphabets = sorted({r["alphabet"] for r in rows})
    Ks = sorted({r["K"] for r in rows})
    print(f"d={args.d}, L={args.L}, {args.trials} trials (construction and sequence drawn anew each trial)\n")
    print("| alphabet \\ K | " + " | ".join(str(k) for k in Ks) + " |")
    print("|---" * (len(Ks) + 1) + "|")
    for a in alphabets:
        cells = [f"{next(r['success'] for r in rows if r['alphabet'] == a and r['K'] == k):.3f}" for k in Ks]
        print(f"| {a} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
