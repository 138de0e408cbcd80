#!/usr/bin/env python3
"""Checks the dependency rules of ARCHITECTURE.md ("Dependency rules") from
the code's own `crate::` paths, so the document cannot drift from the code:

- no import circle among the top-level modules of the product crate, nor of
  the benchmark crate, the test support crate or the simulator;
- the stores (`store`) import only `model` and `error` (and the race-window
  names, which any layer may use);
- the pure modules import no I/O: `model` imports nothing of the crate,
  `plan` and `pace` only `model`, `pass_fit` nothing.

Run from the repository root: `python3 scripts/check_deps.py` (CI does).
Prints the module graph with `--graph`. Exit 1 names every broken rule.
"""

import re
import sys
from pathlib import Path

# Names only (failpoint windows): any layer may use them.
ANY_LAYER = {"race_window"}
ALLOWED = {
    "store": {"model", "error"},
    "model": set(),
    "plan": {"model"},
    "pace": {"model"},
    "pass_fit": set(),
}
CRATES = ["src", "benches/seatflow-bench/src", "tests/support/src", "tests/simulator/src"]
ROOTS = {"lib.rs", "main.rs"}


def top_module(root: Path, path: Path) -> str | None:
    rel = path.relative_to(root)
    if rel.name in ROOTS and len(rel.parts) == 1:
        return None
    return rel.parts[0].removesuffix(".rs")


def graph(root: Path) -> dict[str, set[str]]:
    modules = {top_module(root, p) for p in root.rglob("*.rs")} - {None}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for path in root.rglob("*.rs"):
        me = top_module(root, path)
        if me is None:
            continue
        text = path.read_text()
        # Unit tests may reach anywhere; they are not part of the layering.
        text = text.split("#[cfg(test)]\nmod tests")[0]
        text = re.sub(r"//.*", "", text)
        for used in re.findall(r"\bcrate::(\w+)", text):
            if used in modules and used != me:
                edges[me].add(used)
        # `use crate::{a, b::c}` groups.
        for group in re.findall(r"\buse crate::\{([^;]*)\};", text, re.S):
            for used in re.findall(r"(?:^|[\s,{])(\w+)(?=::|\s*[,}]|$)", group):
                if used in modules and used != me:
                    edges[me].add(used)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, seen = [], set()
    for start in sorted(edges):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges[node] - ANY_LAYER):
                if nxt == start:
                    cycle = frozenset(path)
                    if cycle not in seen:
                        seen.add(cycle)
                        found.append(path + [start])
                elif nxt not in path and nxt > start:
                    stack.append((nxt, path + [nxt]))
    return found


def main() -> int:
    problems = []
    for crate in CRATES:
        root = Path(crate)
        edges = graph(root)
        if "--graph" in sys.argv:
            print(f"{crate}:")
            for m in sorted(edges):
                print(f"  {m} -> {', '.join(sorted(edges[m])) or '-'}")
        for c in circles(edges):
            problems.append(f"{crate}: import circle {' -> '.join(c)}")
        if crate == "src":
            for module, allowed in ALLOWED.items():
                extra = edges.get(module, set()) - allowed - ANY_LAYER
                if extra:
                    problems.append(
                        f"src/{module} may import only {sorted(allowed) or 'nothing'} "
                        f"of the crate, but imports {sorted(extra)}"
                    )
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print("dependency rules hold: no import circle; stores import only model and error; "
              "model, plan, pace and pass_fit are pure")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
