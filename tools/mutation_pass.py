"""A small mutation pass over one module of rnnlab (see docs/mutation.md).

Each mutant changes one AST node of the chosen functions (a comparison flipped, ``and`` <->
``or``, a ``not`` dropped, a number + 1, a statement replaced by ``pass``), is written into a
scratch copy of ``src/`` and ``tests/``, and the chosen tests run with ``-x``: a failing run
kills the mutant. Candidates are shuffled with a fixed seed and the first N are run; each
result is appended to a JSON-lines log.

    python tools/mutation_pass.py --module train.py --functions train,_improved -n 20 \
        --log mutants.jsonl tests/test_train_semantics.py tests/test_train_faults.py
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWAP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}


def candidates(tree: ast.AST, funcs: set[str]) -> list[tuple[str, int, str, int]]:
    """(function, line, kind, index of the node in ast.walk order) for every mutable node."""
    nodes = list(ast.walk(tree))
    index = {id(n): i for i, n in enumerate(nodes)}
    out = []
    for fn in nodes:
        if not isinstance(fn, ast.FunctionDef) or fn.name not in funcs:
            continue
        for node in ast.walk(fn):
            kind = None
            if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP:
                kind = "compare"
            elif isinstance(node, ast.BoolOp):
                kind = "boolop"
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                kind = "drop-not"
            elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
                kind = "constant"
            elif isinstance(node, (ast.Expr, ast.Assign, ast.AugAssign, ast.Raise)) and not (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            ):
                kind = "delete-stmt"
            if kind:
                out.append((fn.name, node.lineno, kind, index[id(node)]))
    return out


class _Apply(ast.NodeTransformer):
    def __init__(self, target: ast.AST, kind: str):
        self.target, self.kind = target, kind

    def generic_visit(self, node):
        node = super().generic_visit(node)
        if node is not self.target:
            return node
        if self.kind == "compare":
            node.ops = [SWAP[type(node.ops[0])]()] + node.ops[1:]
        elif self.kind == "boolop":
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        elif self.kind == "drop-not":
            return node.operand
        elif self.kind == "constant":
            node.value = node.value + 1
        elif self.kind == "delete-stmt":
            return ast.Pass()
        return node


def mutate(text: str, index: int, kind: str) -> str:
    tree = ast.parse(text)
    target = list(ast.walk(tree))[index]
    return ast.unparse(ast.fix_missing_locations(_Apply(target, kind).visit(tree)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--module", required=True, help="file below src/rnnlab, e.g. train.py")
    p.add_argument("--functions", required=True, help="comma-separated function names to mutate")
    p.add_argument("-n", type=int, default=20, help="mutants to run")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log", default="mutants.jsonl")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("tests", nargs="+")
    args = p.parse_args(argv)
    rel = Path("src/rnnlab") / args.module
    text = (ROOT / rel).read_text()
    cands = candidates(ast.parse(text), set(args.functions.split(",")))
    random.Random(args.seed).shuffle(cands)
    print(f"{len(cands)} candidate mutants in {rel}; running {min(args.n, len(cands))}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for d in ("src", "tests"):
            shutil.copytree(ROOT / d, scratch / d)
        shutil.copy(ROOT / "pyproject.toml", scratch / "pyproject.toml")
        env = {**os.environ, "PYTHONPATH": str(scratch / "src")}
        for fname, line, kind, index in cands[: args.n]:
            (scratch / rel).write_text(mutate(text, index, kind))
            t0 = time.time()
            try:
                r = subprocess.run(
                    [sys.executable, "-m", "pytest", *args.tests, "-x", "-q", "-p", "no:cacheprovider"],
                    cwd=scratch,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=args.timeout,
                )
                status = "killed" if r.returncode != 0 else "survived"
                failed = next((ln for ln in r.stdout.splitlines() if ln.startswith("FAILED")), "")
            except subprocess.TimeoutExpired:
                status, failed = "killed (timeout)", ""
            row = {
                "module": args.module,
                "function": fname,
                "line": line,
                "kind": kind,
                "status": status,
                "seconds": round(time.time() - t0, 1),
                "code": text.splitlines()[line - 1].strip()[:120],
                "failed": failed[:160],
            }
            with open(args.log, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{status:9s} {args.module}:{line} {kind:11s} {row['code'][:70]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
