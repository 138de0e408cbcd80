#!/usr/bin/env python3
"""The verdict of a mutation run, and the committed summary.

    python3 scripts/mutants/verdict.py GROUP...
    python3 scripts/mutants/verdict.py --self-test

Reads mutants.out/<group>/mutants.out/ of each group (cargo-mutants' layout;
guards.py writes the same), rewrites the group's row of summary.md, and
exits 1 when a mutant survived that survivors.txt does not list with a
reason. A listed survivor that was caught this time is named, so the list
shrinks with the tests; so is a listed survivor of a function the run
mutated that no mutant of the run matches any more (its code changed).

Survivors are matched by key, not by name: a name is `file:line:col: what`
(`src/run/pass_lease/mod.rs:47:67: replace < with <= in PassFence::holds`), its key the
same without the line and column (`src/run/pass_lease/mod.rs: replace < with <= in
PassFence::holds`): the file, the mutation and, in its `in ...` suffix, the
function. An edit above a survivor moves its line, not its key. Where one
function has the same mutation more than once in a run, the key also
carries the mutated source line, whitespace collapsed, the mutated text
marked « » (`... at `binds «+» asks[to].candidates.len() + 3 < 30_000``),
read from the tree the run left; lines still alike are told apart by an
ordinal (`#2`) in the order of their positions. guards.py writes that line
(and, for SQL, the Rust item) into every name of its own, so its keys
never need the source. An edit to the mutated line changes the key and
asks for a new look at the survivor.

`--self-test` checks the keys of a few real names and that survivors.txt
and guards.py's names parse (no build, no servers).
"""

import datetime
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SUMMARY = HERE / "summary.md"
SURVIVORS = HERE / "survivors.txt"
COLUMNS = ["group", "mutants", "unviable", "viable", "caught", "timeout", "survivors", "commit", "run on"]

# cargo-mutants' and guards.py's names: `path:line:col: what`.
NAME = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?P<col>\d+): (?P<what>.+)$")
# A key: `path: what`, the mutated line (if any) last, in backticks after ` at `.
KEY = re.compile(r"^(?P<file>[^\s:]+): (?P<what>.+?)(?: at `(?P<line>.*)`(?: #(?P<n>\d+))?)?$")


def key(name):
    """A mutant's name without its line and column; a key is its own key."""
    m = NAME.match(name.strip())
    return f"{m['file']}: {m['what']}" if m else name.strip()


def mutated_text(what):
    """The source text a cargo-mutants mutation replaces or deletes, as far
    as its description says (`replace > with >= in f` -> `>`)."""
    what = re.sub(r" in [^`]*$", "", what)
    m = re.match(r"replace (?:match guard )?(.+?) with ", what) or re.match(r"delete (?:match arm )?(.+)$", what)
    return m.group(1).strip("`") if m else ""


def marked_line(line, col, old):
    """`line` trimmed, whitespace collapsed, the mutated text at `col`
    (1-based) marked « »; a bare «» when the text there is not `old`."""
    i = col - 1
    n = len(old) if old and line.startswith(old, i) else 0
    return " ".join((line[:i] + "«" + line[i : i + n] + "»" + line[i + n :]).split())


def source_line(root, name):
    m = NAME.match(name)
    try:
        lines = (root / m["file"]).read_text(encoding="utf-8").splitlines()
        return marked_line(lines[int(m["line"]) - 1], int(m["col"]), mutated_text(m["what"]))
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def keys(names, root=ROOT):
    """{name: key} for the names of one run: `key(name)`, and where that is
    not unique, with the mutated source line (and an ordinal if needed)."""
    names = sorted(set(names), key=position)
    out = {n: key(n) for n in names}
    counts = Counter(out.values())
    for n in names:
        if counts[out[n]] > 1 and NAME.match(n):
            line = source_line(root, n)
            if line is not None:
                out[n] = f"{out[n]} at `{line}`"
    seen = Counter()
    alike = Counter(out.values())
    for n in names:
        if alike[out[n]] > 1:
            seen[out[n]] += 1
            out[n] = f"{out[n]} #{seen[out[n]]}"
    return out


def position(name):
    m = NAME.match(name)
    return (m["file"], int(m["line"]), int(m["col"]), name) if m else (name, 0, 0, name)


def place(k):
    """(file, function or item) of a key: its `in ...` suffix, or the
    function a whole-function mutation names; a Lua script is one place."""
    m = KEY.match(k)
    if not m:
        return (k, "")
    if m["file"].endswith(".lua"):
        return (m["file"], "(script)")
    what = m["what"]
    if " in " in what:
        return (m["file"], what.rsplit(" in ", 1)[1])
    f = re.match(r"replace (\S+?)(?: -> .*)? with ", what)
    return (m["file"], f.group(1) if f and not m["line"] else "")


def survivors():
    """{key: reason}: a key at the start of a line, its reason indented below."""
    listed, name = {}, None
    for line in SURVIVORS.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line[0].isspace():
            if name is None:
                sys.exit(f"{SURVIVORS}: a reason with no mutant above it: {line.strip()}")
            listed[name] = (listed[name] + " " + line.strip()).strip()
        else:
            name = line.rstrip()
            if NAME.match(name):
                sys.exit(f"{SURVIVORS}: a name with its line and column, not a key: {name}")
            if name in listed:
                sys.exit(f"{SURVIVORS}: listed twice: {name}")
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
    if groups == ["--self-test"]:
        return self_test()
    listed = survivors()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    rows = summary_rows()
    failed = False
    for g in groups:
        o = outcomes(g)
        total = sum(len(v) for v in o.values())
        k = keys([m for v in o.values() for m in v])
        unlisted = [m for m in o["missed"] if k[m] not in listed]
        for m in unlisted:
            print(f"{g}: SURVIVED, not in survivors.txt: {m}\n    key: {k[m]}")
        for m in o["caught"] + o["timeout"]:
            if k[m] in listed:
                print(f"{g}: listed as a survivor but caught now (remove it from survivors.txt): {k[m]}")
        mutated = {place(x) for x in k.values()}
        for x in sorted(set(listed) - set(k.values())):
            if place(x) in mutated and place(x)[1]:
                print(f"{g}: listed as a survivor, but no mutant of the run has its key (its code changed?): {x}")
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


def self_test():
    """Keys of real names, and survivors.txt and guards.py's names parse."""
    import tempfile

    def same(got, want):
        assert got == want, f"\n got: {got}\nwant: {want}"

    # cargo-mutants, with a function and without (a whole body replaced).
    same(key("src/run/jobs/expired_orders.rs:271:16: replace > with >= in cancel_locked"),
         "src/run/jobs/expired_orders.rs: replace > with >= in cancel_locked")
    same(key("src/store/redis/seats.rs:257:49: replace match guard rest.len() == b.repairs.len() with true in RedisStore::repair_seats"),
         "src/store/redis/seats.rs: replace match guard rest.len() == b.repairs.len() with true in RedisStore::repair_seats")
    same(key("src/run/pass_lease/mod.rs:45:9: replace PassFence::holds -> bool with false"),
         "src/run/pass_lease/mod.rs: replace PassFence::holds -> bool with false")
    # guards.py: a Lua name (the line is the place), an SQL name (the Rust item and the line).
    same(key("src/store/lua/repair_seats.lua:43:11: replace and with or at `if ok «and» type(reply) == 'table' then`"),
         "src/store/lua/repair_seats.lua: replace and with or at `if ok «and» type(reply) == 'table' then`")
    same(key("src/store/mysql/orders.rs:399:40: replace `>=` with `>` in cancelled_by_us_since at `.push(\" AND o.cancelled_at «>=» \")`"),
         "src/store/mysql/orders.rs: replace `>=` with `>` in cancelled_by_us_since at `.push(\" AND o.cancelled_at «>=» \")`")
    # Line and column are not part of the key; a key is its own key.
    a = "src/run/pass_lease/mod.rs:47:67: replace < with <= in PassFence::holds"
    b = "src/run/pass_lease/mod.rs:112:3: replace < with <= in PassFence::holds"
    same(key(a), key(b))
    same(key(key(a)), key(a))
    same(place(key(a)), ("src/run/pass_lease/mod.rs", "PassFence::holds"))
    # The same mutation twice in one function: told apart by the line, then by an ordinal.
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "src").mkdir()
        (Path(d) / "src/x.rs").write_text("fn f(a: u32) -> u32 {\n    let b = a + 1;\n    a + b + 2\n    a + b + 2\n}\n")
        k = keys([
            "src/x.rs:2:15: replace + with - in f",
            "src/x.rs:3:7: replace + with - in f",
            "src/x.rs:3:11: replace + with - in f",
            "src/x.rs:4:11: replace + with - in f",
            "src/x.rs:1:1: replace f -> u32 with 0",
        ], Path(d))
        same(k["src/x.rs:2:15: replace + with - in f"], "src/x.rs: replace + with - in f at `let b = a «+» 1;`")
        same(k["src/x.rs:3:7: replace + with - in f"], "src/x.rs: replace + with - in f at `a «+» b + 2`")
        same(k["src/x.rs:3:11: replace + with - in f"], "src/x.rs: replace + with - in f at `a + b «+» 2` #1")
        same(k["src/x.rs:4:11: replace + with - in f"], "src/x.rs: replace + with - in f at `a + b «+» 2` #2")
        same(k["src/x.rs:1:1: replace f -> u32 with 0"], "src/x.rs: replace f -> u32 with 0")
    # survivors.txt parses, every entry a key.
    listed = survivors()
    assert listed, "survivors.txt lists nothing"
    for x in listed:
        assert KEY.match(x), f"not a key: {x}"
    # guards.py's names of today's sources: each with its place, keys unique.
    sys.path.insert(0, str(HERE))
    import guards

    for group, targets in guards.GROUPS.items():
        names = [n for t in targets for _, n in guards.target_names(t)]
        assert names, f"guards.py {group}: no mutants"
        ks = [key(n) for n in names]
        dup = [x for x, c in Counter(ks).items() if c > 1]
        assert not dup, f"guards.py {group}: keys not unique: {dup[:3]}"
        for n in names:
            assert NAME.match(n) and " at `" in n, f"guards.py {group}: no place in {n}"
            if group == "sql":
                assert re.search(r" in \w+ at `", n), f"guards.py sql: no Rust item in {n}"
    print(f"verdict.py self-test: ok ({len(listed)} survivors listed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
