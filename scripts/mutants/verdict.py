#!/usr/bin/env python3
"""The verdict of a mutation run, and the committed summary.

    python3 scripts/mutants/verdict.py GROUP...

Reads mutants.out/<group>/mutants.out/ of each group (cargo-mutants' layout;
guards.py writes the same), rewrites the group's row of summary.md, and
exits 1 when a mutant survived that survivors.txt does not list with a
reason. A listed survivor that was caught this time is named, so the list
shrinks with the tests; entries are matched by their full name, line and
column included, so a change to guarded code asks for a new look.
"""

import datetime
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SUMMARY = HERE / "summary.md"
SURVIVORS = HERE / "survivors.txt"
COLUMNS = ["group", "mutants", "unviable", "viable", "caught", "timeout", "survivors", "commit", "run on"]


def survivors():
    """{name: reason}: a name at the start of a line, its reason indented below."""
    listed, name = {}, None
    for line in SURVIVORS.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line[0].isspace():
            if name is None:
                sys.exit(f"{SURVIVORS}: a reason with no mutant above it: {line.strip()}")
            listed[name] = (listed[name] + " " + line.strip()).strip()
        else:
            name = line.rstrip()
            listed[name] = ""
    unexplained = [n for n, why in listed.items() if not why]
    if unexplained:
        sys.exit(f"{SURVIVORS}: no reason given for: {unexplained}")
    return listed


def outcomes(group):
    d = ROOT / "mutants.out" / group / "mutants.out"
    if not d.exists():
        sys.exit(f"no results for {group} in {d}: run scripts/mutants.sh {group}")

    def read(name):
        f = d / f"{name}.txt"
        return f.read_text().splitlines() if f.exists() else []

    return {
        "caught": read("caught") + read("previously_caught"),
        "missed": read("missed"),
        "timeout": read("timeout"),
        "unviable": read("unviable"),
    }


def summary_rows():
    rows = {}
    if SUMMARY.exists():
        for line in SUMMARY.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == len(COLUMNS) and cells[0] not in ("group",) and not set(cells[0]) <= set("-: "):
                rows[cells[0]] = cells
    return rows


def write_summary(rows):
    order = ["planner", "repair-path", "store-scripts", "pass", "lua", "sql"]
    lines = [
        "# Mutation testing: the last full run of each group",
        "",
        "Written by `scripts/mutants.sh` (`scripts/mutants/verdict.py`); survivors",
        "are listed with their reasons in `scripts/mutants/survivors.txt`.",
        "*viable* = built (and, for Lua, loaded by Redis); *timeout* = the tests",
        "hung until the per-mutant limit (a changed behaviour, counted apart).",
        "A group run again with `ITERATE=1` keeps what earlier runs caught;",
        "cargo-mutants counts earlier unviable mutants among them.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for g in sorted(rows, key=lambda g: order.index(g) if g in order else len(order)):
        lines.append("| " + " | ".join(rows[g]) + " |")
    SUMMARY.write_text("\n".join(lines) + "\n")


def main(groups):
    if not groups:
        sys.exit(__doc__)
    listed = survivors()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    rows = summary_rows()
    failed = False
    for g in groups:
        o = outcomes(g)
        total = sum(len(v) for v in o.values())
        unlisted = [m for m in o["missed"] if m not in listed]
        for m in unlisted:
            print(f"{g}: SURVIVED, not in survivors.txt: {m}")
        for m in o["caught"] + o["timeout"]:
            if m in listed:
                print(f"{g}: listed as a survivor but caught now (remove it from survivors.txt): {m}")
        failed |= bool(unlisted)
        rows[g] = [
            g,
            str(total),
            str(len(o["unviable"])),
            str(total - len(o["unviable"])),
            str(len(o["caught"])),
            str(len(o["timeout"])),
            f"{len(o['missed'])} ({len(unlisted)} unlisted)",
            commit + (" (modified)" if dirty else ""),
            datetime.date.today().isoformat(),
        ]
        print(f"{g}: " + ", ".join(f"{k} {len(v)}" for k, v in o.items()))
    write_summary(rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
