#!/usr/bin/env python3
"""Checks the dependency and layout rules of ARCHITECTURE.md ("Dependency
rules") from the code itself, so the document cannot drift from the code:

- every top-level folder of the product (its layers: `error`, `store`,
  `config`, `run`, `metrics`, `daemon`, `ops`, and the binary) has a layer
  in `LAYERS`, and every top-level module of the pure crate
  (crates/seatflow-core) one in `CORE_LAYERS` (a new one must be placed);
  each imports only from layers below its own;
- inside each folder too: its modules have an order (`FOLDER_LAYERS`,
  `CORE_FOLDER_LAYERS`, lowest first; a new module must be placed) and a
  module, with every file in it, imports only the siblings below it. A
  folder's `mod.rs` is the folder itself, not ordered against its modules;
  the pure modules it re-exports are below all of them;
- imports are the code's paths, in `use` trees and inline: `crate::`,
  `super::` and `self::` (resolved from the file's module path), and the
  binary's `seatflow_reconciler::`; the binary (`main.rs` and the `cli/`
  modules it declares) is the module `cli`, above everything. Unit tests
  (`#[cfg(test)] mod tests`, inline or in a file) may reach anywhere;
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
- one door: every run enters through `jobs::run` (`DOOR`,
  src/run/jobs/mod.rs), which takes the process's guard; no other file of
  the product, its tests or its benchmark runs a job itself
  (`seat_sweep::run`, `expired_orders::run`).

Run from the repository root: `python3 scripts/check_deps.py` (CI does).
Prints the module graph with `--graph` (the top level, then each folder's
modules). Exit 1 names every broken rule.
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
# The product's layers, its top-level folders, lowest first, as
# ARCHITECTURE.md lists them: a module imports only from the layers before
# its own. The pure decisions are seatflow-core's (`CORE_LAYERS`); lib.rs
# re-exports them at their old paths, names without files here.
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
    {"model", "pace", "pass_fit", "schedule", "repeats", "grants", "replica_lag"},
    {"plan", "capacity", "keys", "resp"},
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
# The product's binary: `main.rs` and the modules it declares in `cli/`.
BINARY = "cli"
# Inside each folder of the product, its modules' layers, lowest first: a
# module imports only the siblings in layers before its own. (The folder's
# `mod.rs` is not ordered: it is the folder itself.)
FOLDER_LAYERS = {
    "cli": [{"check_config", "migrate"}],
    "config": [{"sources", "tls"}, {"secret"}, {"validate"}],
    "daemon": [{"change_state"}, {"runner"}, {"http", "change_watch"}],
    "daemon/change_watch": [{"holder", "binlog"}, {"data_loss"}],
    "daemon/runner": [{"status"}],
    "metrics": [{"process", "telemetry", "families", "seat_reads"}, {"pass", "changes"}],
    "ops": [{"stdout"}, {"access", "inspect", "push"}, {"demo"}],
    "ops/access": [{"probe"}, {"start"}],
    "ops/demo": [{"fixtures", "servers"}, {"tour"}],
    "run": [
        {"progress", "retry", "refusals", "showtime_leases", "replica_choice"},
        {"context"},
        {"pass_lease"},
        {"jobs"},
    ],
    "run/jobs": [
        {"deviations", "audit_log"},
        {"report"},
        {"strict", "pass_run"},
        {"request", "seat_sweep"},
        {"expired_orders"},
    ],
    "run/jobs/seat_sweep": [{"notices", "read"}, {"chunk", "repair"}, {"seen"}],
    "store": [{"mysql"}, {"redis"}],
    "store/mysql": [
        {"sql", "migrations", "replica", "binlog"},
        {"audit", "orders", "occupancy_read", "schema", "seat_map"},
        {"confirm", "sweep", "cancel", "grants_held"},
    ],
    "store/mysql/binlog": [{"connection", "decode", "position", "reader"}, {"setup"}, {"stream"}],
    "store/redis": [
        {"tls"},
        {"bulk_read"},
        {"conn"},
        {"acl_check", "audit_backlog", "binlog_position", "cursors", "data_marker", "leases", "notify",
         "seats"},
    ],
}
# The same inside the folders of the pure crate.
CORE_FOLDER_LAYERS = {
    "changes": [{"events", "marker", "queue"}],
    "model": [{"contract", "occupancy", "seat_names", "schema"}, {"rows_mark", "holds"}],
    "model/schema": [{"types", "uses", "indexes"}, {"spec", "judge"}],
}
FOLDERS = {"src": FOLDER_LAYERS, CORE: CORE_FOLDER_LAYERS}


def module_path(root: Path, path: Path) -> tuple[str, ...]:
    """A file's module path in its crate: `run/jobs/mod.rs` is
    `("run", "jobs")`, `run/context.rs` `("run", "context")`, the crate
    roots `()`. The product's binary (`main.rs` and the `cli/` files it
    declares) is the module `cli`, above everything: `main.rs` is its root
    as a folder's `mod.rs` is its folder's."""
    rel = path.relative_to(root)
    parts = list(rel.parts)
    if root == Path("src") and parts == ["main.rs"]:
        return (BINARY,)
    if len(parts) == 1 and parts[0] in ROOTS:
        return ()
    if parts[-1] == "mod.rs":
        parts.pop()
    else:
        parts[-1] = parts[-1].removesuffix(".rs")
    return tuple(parts)


def in_binary(root: Path, path: Path) -> bool:
    rel = path.relative_to(root)
    return root == Path("src") and (rel.parts == ("main.rs",) or rel.parts[0] == BINARY)


def reexports(root: Path) -> set[tuple[str, ...]]:
    """The pure crate's modules the product re-exports (`pub use
    seatflow_core::{model, plan};` in lib.rs, `pub use
    seatflow_core::redis_acl;` in a folder): modules without files here, at
    the path of the file that re-exports them, below every module of their
    folder (they import nothing of the product)."""
    names = set()
    for path in root.rglob("*.rs"):
        here = () if path.relative_to(root).parts == ("lib.rs",) else module_path(root, path)
        if path.name == "main.rs":
            continue
        for body in re.findall(r"\bpub use seatflow_core::(?:\w+::)*(\{[^;]*\}|\w+);", path.read_text()):
            for name in set(re.findall(r"\b[a-z_]\w*\b", body)) - {"self"}:
                names.add(here + (name,))
    return names


def reexported(root: Path) -> set[str]:
    """The re-exported pure modules at the crate's top (lib.rs)."""
    return {m[0] for m in reexports(root) if len(m) == 1}


def use_paths(tree: str) -> list[list[str]]:
    """The paths a `use` tree names: `a::{b, c::{d, self}}` is a::b, a::c::d,
    a::c."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)

    def parse(s: str, i: int, prefix: list[str]) -> tuple[list[list[str]], int]:
        out, segs, word = [], list(prefix), ""
        while i < len(s):
            c = s[i]
            if c.isalnum() or c == "_" or c == "*":
                word += c
            elif c == ":":
                if word:
                    segs.append(word)
                    word = ""
                i += 1
            elif c == "{":
                inner, i = parse(s, i + 1, segs)
                out += inner
                segs, word = list(prefix), ""
            elif c == ",":
                if word:
                    out.append(segs + ([] if word == "self" else [word]))
                elif segs != prefix:
                    out.append(segs)
                segs, word = list(prefix), ""
            elif c == "}":
                if word:
                    out.append(segs + ([] if word == "self" else [word]))
                return out, i
            i += 1
        if word:
            out.append(segs + ([] if word == "self" else [word]))
        return out, i

    return [p for p in parse(tree, 0, [])[0] if p]


def imports(root: Path, path: Path, modules: set[tuple[str, ...]]) -> set[tuple[str, ...]]:
    """The modules of its crate a file imports: its `crate::`, `super::`
    and `self::` paths (in `use` trees and inline), the binary's
    `seatflow_reconciler::` ones, each resolved to the longest module path
    it names. Its unit tests are left out: they may reach anywhere."""
    me = module_path(root, path)
    text = path.read_text()
    text = re.split(r"#\[cfg\(test\)\]\n(?:pub(?:\(\w+\))? )?mod tests", text)[0]
    text = re.sub(r"//.*", "", text)
    binary = in_binary(root, path)
    paths = [use_paths(t) for t in re.findall(r"\buse\s+([^;]+);", text)]
    paths = [p for ps in paths for p in ps]
    paths += [m.split("::") for m in re.findall(r"(?<![\w$:])((?:crate|super|self|seatflow_reconciler)(?:::\w+)+)", text)]
    found = set()
    for segs in paths:
        head = segs[0]
        if head == "seatflow_reconciler" and binary:
            base = ()
        elif head == "crate":
            base = (BINARY,) if binary else ()
        elif head in ("super", "self"):
            base = me
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base = base[:-1] if base != (BINARY,) else base
                segs = segs[1:]
            segs = ["_"] + segs
        else:
            continue
        full = base + tuple(segs[1:])
        for n in range(len(full), 0, -1):
            if full[:n] in modules:
                if full[:n] != me:
                    found.add(full[:n])
                break
    return found


def module_graph(root: Path) -> dict[tuple[str, ...], dict[tuple[str, ...], Path]]:
    """Every module of a crate -> the modules it imports, each with the
    first file that does."""
    files = sorted(root.rglob("*.rs"))
    # Unit tests in files of their own (`#[cfg(test)] mod tests;`) are tests.
    tests = {
        module_path(root, p) + (name,)
        for p in files
        for name in re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\(\w+\))? )?mod (\w+);", p.read_text())
    }
    files = [p for p in files if not any(module_path(root, p)[:len(t)] == t for t in tests)]
    modules = {module_path(root, p) for p in files} | reexports(root)
    modules |= {m[:n] for m in modules for n in range(1, len(m))}
    edges: dict[tuple[str, ...], dict[tuple[str, ...], Path]] = {m: {} for m in modules}
    for path in files:
        me = module_path(root, path)
        for used in imports(root, path, modules):
            edges[me].setdefault(used, path)
    return edges


def graph(root: Path) -> dict[str, set[str]]:
    """The crate's top-level modules -> the top-level modules they import."""
    edges: dict[str, set[str]] = {}
    for me, used in module_graph(root).items():
        if not me:
            continue
        edges.setdefault(me[0], set())
        for u in used:
            if u and u[0] != me[0]:
                edges[me[0]].add(u[0])
    return edges


def folder_problems(crate: str, folders: dict[str, list[set[str]]]) -> tuple[list[str], list[str]]:
    """Inside each folder its modules have an order (`FOLDER_LAYERS`,
    lowest first): a module (and every file in it) imports only the
    siblings below it. A folder's `mod.rs` is the folder's own module: it
    may use all of them, and they may use what it holds (`super::Item`).
    The re-exported pure modules are below every sibling. Returns the
    problems and the folders' graphs."""
    root = Path(crate)
    edges = module_graph(root)
    pure = reexports(root)
    children: dict[tuple[str, ...], set[str]] = {}
    for m in edges:
        if m and m not in pure:
            children.setdefault(m[:-1], set()).add(m[-1])
    problems, lines = [], []
    sib: dict[tuple[str, ...], dict[str, dict[str, Path]]] = {}
    for me, used in edges.items():
        for u, path in used.items():
            k = 0
            while k < min(len(me), len(u)) and me[k] == u[k]:
                k += 1
            if k == 0 or k == len(me) or k == len(u):
                continue  # across the top (LAYERS), or a folder and its own modules
            sib.setdefault(me[:k], {}).setdefault(me[k], {}).setdefault(u[k], path)
    for folder in sorted(children):
        if not folder:
            continue
        name = "/".join(folder)
        kids = children[folder]
        edges_here = sib.get(folder, {})
        lines.append(f"  {name}/: " + "; ".join(
            f"{k} -> {', '.join(sorted(edges_here.get(k, {}))) or '-'}" for k in sorted(kids)))
        if len(kids) < 2:
            continue
        layers = folders.get(name)
        if layers is None:
            problems.append(f"{crate}/{name}/ has no order of its modules: add it to FOLDER_LAYERS "
                            "(scripts/check_deps.py), lowest first")
            continue
        layer = {m: i for i, names in enumerate(layers) for m in names}
        for kid in sorted(kids - set(layer) - ANY_LAYER):
            problems.append(f"{crate}/{name}/{kid} has no place in FOLDER_LAYERS[{name!r}] "
                            "(scripts/check_deps.py): place it")
        for gone in sorted(set(layer) - kids):
            problems.append(f"FOLDER_LAYERS[{name!r}] names {gone}, not a module of {crate}/{name}/")
        for kid, used in sorted(edges_here.items()):
            for up, path in sorted(used.items()):
                if folder + (up,) in pure or up in ANY_LAYER or kid not in layer:
                    continue
                if layer.get(up, -1) >= layer[kid]:
                    mod = "::".join(folder)
                    problems.append(f"{path}: {mod}::{kid} (layer {layer[kid]} of {name}/) imports "
                                    f"{mod}::{up} (layer {layer.get(up)}): only the modules below "
                                    f"it in its folder may be imported (FOLDER_LAYERS[{name!r}])")
    return problems, lines


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


# The one door of every run (ARCHITECTURE.md, "One way in"), `jobs::run` in
# this file: the only file that may run a job itself.
DOOR = Path("src/run/jobs/mod.rs")


def door_problems() -> list[str]:
    call = re.compile(r"\b(seat_sweep|expired_orders)::run\b")
    return [
        f"{path} runs a job itself: every run enters through jobs::run ({DOOR})"
        for root in ("src", "tests", "benches")
        for path in sorted(Path(root).rglob("*.rs"))
        if path != DOOR and call.search(re.sub(r"//.*", "", path.read_text()))
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
        if crate in FOLDERS:
            found, lines = folder_problems(crate, FOLDERS[crate])
            problems += found
            if "--graph" in sys.argv:
                print("\n".join(lines))
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
        print("dependency rules hold: every module in its layer, and in its folder's order; no "
              "import circle; stores import "
              "only model and error; seatflow-core depends on no I/O crate, its model, plan, "
              f"pace, pass_fit and capacity import as allowed; rooms within {ROOM_LINES} lines; "
              "runs enter through jobs::run alone")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
