#!/usr/bin/env python3
"""Checks the dependency and layout rules of ARCHITECTURE.md ("Dependency
rules") from the code itself, so the document cannot drift from the code:

- every top-level module of the product has a layer in `LAYERS`, and
  every module of the pure crate (crates/seatflow-core) one in
  `CORE_LAYERS` (a new module must be placed); each imports (its `crate::`
  paths) only from layers below its own;
- no import circle among the top-level modules of the product crate, nor of
  the pure crate, the benchmark crate, the test support crate or the
  simulator;
- the stores (`store`) import only `model` (seatflow-core's, re-exported)
  and `error` (and the race-window names, which any layer may use);
- the pure decisions are pure: seatflow-core's Cargo.toml names no I/O
  crate (`IO_CRATES`) among its dependencies, so the compiler refuses an
  import of one; inside it, `model` imports nothing of the crate, `plan`
  only `model`, `pass_fit` nothing, `capacity` only `pass_fit`;
- rooms fit one sitting: no file of the product or of the pure crate has
  more than `ROOM_LINES` lines outside its unit-test module;
- one door: every run enters through `runner::enter` (`DOOR`); no other
  file of the product calls `jobs::run`.

Run from the repository root: `python3 scripts/check_deps.py` (CI does).
Prints the module graph with `--graph`. Exit 1 names every broken rule.
"""

import re
import sys
import tomllib
from pathlib import Path

# The pure decisions' crate (its sources).
CORE = "crates/seatflow-core/src"
# Names only (failpoint windows): any layer may use them.
ANY_LAYER = {"race_window"}
# What some modules may import of their own crate, by crate.
ALLOWED = {
    "src": {"store": {"model", "error"}},
    CORE: {
        "model": set(),
        "plan": {"model"},
        "pace": {"model"},
        "pass_fit": set(),
        "capacity": {"pass_fit"},
    },
}
# The product's layers, lowest first, as ARCHITECTURE.md lists them: a
# module imports only from the layers before its own. The pure decisions
# are seatflow-core's (`CORE_LAYERS`); lib.rs re-exports them at their old
# paths, names without files here.
LAYERS = [
    {"error"},
    {"store", "config"},
    {"run"},
    {"metrics"},
    {"daemon"},
    {"ops"},
    # The binary's own modules (`main.rs` declares them): above everything.
    {"cli"},
]
# seatflow-core's layers, lowest first.
CORE_LAYERS = [
    {"model", "pace", "pass_fit", "schedule", "repeats", "grants", "replica"},
    {"plan", "capacity", "keys"},
    {"changes", "redis_acl"},
]
# The crates no pure decision may depend on: each does I/O (or is an I/O
# crate's own part).
IO_CRATES = {
    "tokio", "tokio-util", "tokio-cron-scheduler", "redis", "sqlx", "mysql_async",
    "mysql_common", "axum", "hyper", "hyper-util", "reqwest",
}
ROOM_LINES = 600
CRATES = ["src", CORE, "benches/seatflow-bench/src", "tests/support/src", "tests/simulator/src"]
LAYERED = {"src": LAYERS, CORE: CORE_LAYERS}
ROOTS = {"lib.rs", "main.rs"}


def top_module(root: Path, path: Path) -> str | None:
    rel = path.relative_to(root)
    if rel.name in ROOTS and len(rel.parts) == 1:
        return None
    return rel.parts[0].removesuffix(".rs")


def reexported(root: Path) -> set[str]:
    """The pure crate's modules lib.rs re-exports at the crate's top (`pub
    use seatflow_core::{model, plan};`): names without files, below every
    layer of the crate (they import nothing of it)."""
    lib = root / "lib.rs"
    if not lib.exists():
        return set()
    names = set()
    for body in re.findall(r"\bpub use seatflow_core::(\{[^;]*\}|\w+);", lib.read_text()):
        names |= set(re.findall(r"\w+", body)) - {"self"}
    return names


def graph(root: Path) -> dict[str, set[str]]:
    modules = {top_module(root, p) for p in root.rglob("*.rs")} - {None}
    modules |= reexported(root)
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


def layer_problems(crate: str, layers: list[set[str]], edges: dict[str, set[str]]) -> list[str]:
    layer = {m: i for i, names in enumerate(layers) for m in names}
    name = "LAYERS" if crate == "src" else "CORE_LAYERS"
    problems = []
    for module in sorted(set(edges) - set(layer) - ANY_LAYER):
        problems.append(f"{crate}/{module} has no layer: place it in {name} (scripts/check_deps.py) "
                        "and in ARCHITECTURE.md's dependency rules")
    for module, used in sorted(edges.items()):
        if module not in layer:
            continue
        for up in sorted(u for u in used - ANY_LAYER if layer.get(u, -1) >= layer[module]):
            problems.append(f"{crate}/{module} (layer {layer[module]}) imports {crate}/{up} "
                            f"(layer {layer[up]}): only layers below may be imported")
    return problems


def io_problems() -> list[str]:
    """seatflow-core's dependencies (every target's) that do I/O."""
    manifest = Path(CORE).parent / "Cargo.toml"
    data = tomllib.loads(manifest.read_text())
    tables = [("dependencies", data.get("dependencies", {}))]
    for target, spec in data.get("target", {}).items():
        tables.append((f"target.{target}.dependencies", spec.get("dependencies", {})))
    problems = []
    for table, deps in tables:
        for key, spec in deps.items():
            # A renamed dependency names its crate as `package`.
            crate = spec.get("package", key) if isinstance(spec, dict) else key
            if crate in IO_CRATES:
                problems.append(f"{manifest}: [{table}] names {crate}, an I/O crate: "
                                "the pure decisions may not depend on it (do the I/O in the product)")
    return problems


def outside_tests(path: Path) -> int:
    """Lines of a file before its unit-test module, comments included."""
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines[:-1]):
        if line.strip() == "#[cfg(test)]" and re.match(r"\s*(pub(\(\w+\))? )?mod \w+ \{", lines[i + 1]):
            lines = lines[:i]
            break
    while lines and not lines[-1].strip():
        lines.pop()
    return len(lines)


def room_problems() -> list[str]:
    return [
        f"{path}: {n} lines outside its unit tests (a room holds at most {ROOM_LINES}): split it by concern"
        for root in ("src", CORE)
        for path in sorted(Path(root).rglob("*.rs"))
        if (n := outside_tests(path)) > ROOM_LINES
    ]


# The one door of every run (ARCHITECTURE.md, "One way in"): the only file
# that may call `jobs::run`.
DOOR = Path("src/daemon/runner/door.rs")


def door_problems() -> list[str]:
    call = re.compile(r"\bjobs::run\b")
    return [
        f"{path} calls jobs::run: every run enters through runner::enter ({DOOR})"
        for path in sorted(Path("src").rglob("*.rs"))
        if path != DOOR and path.parent != Path("src/run/jobs")
        and call.search(re.sub(r"//.*", "", path.read_text()))
    ]


def main() -> int:
    problems = room_problems() + io_problems() + door_problems()
    for crate in CRATES:
        root = Path(crate)
        edges = graph(root)
        if "--graph" in sys.argv:
            print(f"{crate}:")
            for m in sorted(edges):
                print(f"  {m} -> {', '.join(sorted(edges[m])) or '-'}")
        for c in circles(edges):
            problems.append(f"{crate}: import circle {' -> '.join(c)}")
        if crate in LAYERED:
            # The re-exported pure modules are below every layer.
            placed = {m: e for m, e in edges.items() if m not in reexported(root)}
            problems += layer_problems(crate, LAYERED[crate], placed)
        for module, allowed in ALLOWED.get(crate, {}).items():
            extra = edges.get(module, set()) - allowed - ANY_LAYER
            if extra:
                problems.append(
                    f"{crate}/{module} may import only {sorted(allowed) or 'nothing'} "
                    f"of the crate, but imports {sorted(extra)}"
                )
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print("dependency rules hold: every module in its layer, no import circle; stores import "
              "only model and error; seatflow-core depends on no I/O crate, its model, plan, "
              f"pace, pass_fit and capacity import as allowed; rooms within {ROOM_LINES} lines; "
              "runs enter through runner::enter alone")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
