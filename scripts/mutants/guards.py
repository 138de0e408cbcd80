#!/usr/bin/env python3
"""Mutation testing of the guards cargo-mutants cannot reach.

cargo-mutants mutates Rust. The compare-and-set, fencing and type checks live
in Lua (`src/store/lua/*.lua`, compiled in with `include_str!`) and the
conditional cancel and the confirmation before a lowering live in SQL text
(string literals in `src/store/mysql/`). This mutates those texts:

- comparisons (`==`/`~=`, `=`/`<>`, `<`/`<=`, `>`/`>=`),
- logical operators (`and`/`or`, a `not` removed),
- removed conditions (a Lua `if ... then` that is never taken, an SQL
  conjunct dropped, `FOR UPDATE`, `BINARY` or a `LEFT` join dropped,
  `IS NULL`/`IS NOT NULL`, `COALESCE(..., FALSE)`/`TRUE`),
- swapped arguments (two `KEYS[i]`/`ARGV[j]` of one Lua line),

one at a time, rebuilds, and runs the tests named for the file. A mutant is
*caught* when they fail, *missed* when they pass, *timeout* when they hang,
*unviable* when it does not build or load (Redis refuses the script; MariaDB
calls the SQL a syntax error or names a column it does not have).

    python3 scripts/mutants/guards.py lua|sql [--list] [--only SUBSTRING] [--iterate]

Results go to mutants.out/<group>/mutants.out/ (caught.txt, missed.txt,
timeout.txt, unviable.txt, logs/), laid out as cargo-mutants lays out its
own, so one verdict (verdict.py) reads both. A mutant's name is
`path:line:col: what [in ITEM] at `LINE``: ITEM is the Rust function or
constant whose SQL it mutates, LINE the mutated source line (trimmed,
whitespace collapsed, the mutated text marked « »), and `#n` after it
tells apart the same mutation on identical lines of one file. verdict.py
keys survivors by the name without line and column, so what identifies a
mutant is its item and its own line, which edits elsewhere do not change. `--iterate` skips what an
earlier run caught or found unviable and keeps it (previously_caught.txt),
as cargo-mutants' `--iterate` does, and keeps its timeouts too (the same
tests would hang again; cargo-mutants tests those again). The unmutated
tests run first: when they fail, nothing is judged (exit 1). The source is
restored after each mutant, also when interrupted.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 150

# The test binaries every mutant is judged by: `it` (the product's package)
# and `failpoints` (the package seatflow-failpoint-tests), in one cargo
# invocation (one build of the library, with its failpoints), and per file
# the tests by name (a substring of `<folder>::<file>::<test>` in `it`,
# `<file>::<test>` in `failpoints`).
TEST_TARGETS = [
    "-p", "seatflow-reconciler", "-p", "seatflow-failpoint-tests",
    "--test", "it", "--test", "failpoints",
]
SEAT_TESTS = ["races::", "safety::", "own_keys::", "strict_reading::", "bad_data::", "jobs::"]
LEASE_TESTS = SEAT_TESTS + ["passes::", "cluster::"]
# `daemon::run::` is tests/it/daemon/run.rs (`daemon::` alone is that whole folder).
PASS_TESTS = ["passes::", "daemon::run::", "cluster::", "own_keys::"]
# The writing-key bracket around the seat scripts' writes, on a real server.
OWN_WRITES_TEST = "changes::our_scripts_seat_writes_are_told_apart"


@dataclass
class Target:
    path: str
    tests: list
    functions: tuple = ()  # SQL: the Rust items whose string literals are mutated


def lua_target(path, tests):
    """A script, judged by the tests of its callers and by its own contract
    (tests/it/repairs/lua_scripts.rs: the script called directly)."""
    return Target(path, tests + ["lua_scripts::"])


GROUPS = {
    "lua": [
        lua_target("src/store/lua/repair_seats.lua", SEAT_TESTS + [OWN_WRITES_TEST]),
        lua_target("src/store/lua/rebuild_hash.lua", SEAT_TESTS + [OWN_WRITES_TEST]),
        lua_target("src/store/lua/record_suspects.lua", SEAT_TESTS),
        lua_target("src/store/lua/lease_acquire.lua", LEASE_TESTS),
        lua_target("src/store/lua/lease_renew.lua", LEASE_TESTS),
        lua_target("src/store/lua/lease_release.lua", LEASE_TESTS),
        lua_target("src/store/lua/cursor_cas.lua", SEAT_TESTS + ["passes::"]),
        lua_target("src/store/lua/pass_claim.lua", PASS_TESTS),
        lua_target("src/store/lua/pass_finish.lua", PASS_TESTS),
        lua_target("src/store/lua/backlog_push.lua", SEAT_TESTS + ["audit::", "audit_backlog::"]),
        lua_target("src/store/lua/backlog_read.lua", SEAT_TESTS + ["audit::", "audit_backlog::"]),
        lua_target("src/store/lua/backlog_ack.lua", SEAT_TESTS + ["audit::", "audit_backlog::"]),
    ],
    "sql": [
        # The conditional cancel (rule 3) and the recognition of its own
        # commit on a retry (rules 9 and 10).
        Target(
            "src/store/mysql/cancel.rs",
            ["races::", "safety::", "jobs::", "strict_reading::", "bad_data::"],
            ("fn cancel_steps", "fn cancelled_by_us_since"),
        ),
        # The confirmation right before a write (rules 4 and 15).
        Target(
            "src/store/mysql/confirm/mod.rs",
            SEAT_TESTS,
            ("fn push_position", "fn confirm_query", "fn seats_named", "fn confirm_seats"),
        ),
        # What every read of seat rows selects, and the dates that decode
        # where SQL filters by them (the rows' own dates are checked in Rust:
        # `order_dates`, in the repair-path group of scripts/mutants.sh).
        Target(
            "src/store/mysql/sql.rs",
            SEAT_TESTS,
            ("const SEAT_ROW_COLUMNS", "fn date_ok"),
        ),
    ],
}


@dataclass
class Mutant:
    path: str
    offset: int  # into the file's text
    old: str
    new: str
    what: str
    # The Rust item (fn or const) whose string literal an SQL mutant is in.
    # A Lua mutant has none: a script is one chunk, mostly without functions
    # of its own, so its place is the mutated line (`at` below) alone.
    item: str = ""

    def name(self, text, nth=0):
        """`path:line:col: what [in item] at `line``: the line and column as
        cargo-mutants gives them; the item and the mutated line (the text
        marked « ») name the mutant wherever the line moves to (verdict.py
        keys survivors by all but the line and column). `nth` (from 1) tells
        apart the same mutation on identical lines of one file."""
        line = text.count("\n", 0, self.offset) + 1
        start = text.rfind("\n", 0, self.offset) + 1
        col = self.offset - start + 1
        end = text.find("\n", self.offset)
        end = len(text) if end < 0 else end
        stop = min(self.offset + len(self.old), end)
        marked = text[start : self.offset] + "«" + text[self.offset : stop] + "»" + text[stop:end]
        place = f" in {self.item}" if self.item else ""
        return f"{self.path}:{line}:{col}: {self.what}{place} at `{' '.join(marked.split())}`" + (f" #{nth}" if nth else "")

    def apply(self, text):
        assert text[self.offset : self.offset + len(self.old)] == self.old
        return text[: self.offset] + self.new + text[self.offset + len(self.old) :]


# ---------------------------------------------------------------- Lua


def lua_code_spans(text):
    """(start, end) of the code outside comments and string literals."""
    spans, i, start, n = [], 0, 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            spans.append((start, i))
            i = text.find("\n", i)
            i = n if i < 0 else i
            start = i
        elif c in "'\"":
            spans.append((start, i))
            i += 1
            while i < n and text[i] != c:
                i += 2 if text[i] == "\\" else 1
            i += 1
            start = i
        else:
            i += 1
    spans.append((start, n))
    return [(a, b) for a, b in spans if b > a]


LUA_SWAPS = [
    (r"==", "~="),
    (r"~=", "=="),
    (r"<=", "<"),
    (r">=", ">"),
    (r"(?<![<>=~])<(?!=)", "<="),
    (r"(?<![<>=~-])>(?!=)", ">="),
    (r"\band\b", "or"),
    (r"\bor\b", "and"),
    (r"\bnot\s+", ""),
]


def lua_mutants(path, text):
    out = []
    for a, b in lua_code_spans(text):
        code = text[a:b]
        for pattern, new in LUA_SWAPS:
            for m in re.finditer(pattern, code):
                old = m.group(0)
                what = f"replace {old.strip()} with {new}" if new else f"delete {old.strip()}"
                out.append(Mutant(path, a + m.start(), old, new, what))
        # A guard removed: the condition of an `if`/`elseif` never holds.
        for m in re.finditer(r"\b(?:if|elseif)\s+(.+?)\s+then\b", code, re.S):
            cond = m.group(1)
            out.append(Mutant(path, a + m.start(1), cond, "false", f"condition `{short(cond)}` never holds"))
    # Swapped arguments: the first two different KEYS/ARGV references of a line.
    pos = 0
    for line in text.splitlines(keepends=True):
        code = line.split("--", 1)[0]
        refs = list(re.finditer(r"\b(?:KEYS|ARGV)\[[^\]]+\]", code))
        pair = next(((x, y) for x in refs for y in refs if x.start() < y.start() and x.group(0) != y.group(0)), None)
        if pair:
            x, y = pair
            old = code[x.start() : y.end()]
            new = y.group(0) + code[x.end() : y.start()] + x.group(0)
            out.append(Mutant(path, pos + x.start(), old, new, f"swap {x.group(0)} and {y.group(0)}"))
        pos += len(line)
    return out


# ---------------------------------------------------------------- SQL


def item_body(text, header):
    """(start, end) of a Rust item: from its header to the end of its body
    (`fn`) or of its statement (`const`)."""
    start = text.find(header)
    if start < 0:
        raise SystemExit(f"no `{header}` in the file: update the targets in {__file__}")
    if header.startswith("const"):
        return start, text.index(";\n", start)
    depth, i = 0, text.index("{", start)
    while True:
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return start, i + 1
        elif text[i] == '"':
            i = rust_string_end(text, i) - 1
        elif text.startswith("//", i):
            i = text.index("\n", i)
        i += 1


def rust_string_end(text, i):
    """Index just past the string literal that opens at text[i] == '"'."""
    i += 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def rust_string_contents(text, a, b):
    """(start, end) of each string literal's contents within text[a:b],
    comments and char literals skipped."""
    out, i = [], a
    while i < b:
        if text.startswith("//", i):
            i = text.index("\n", i)
        elif text.startswith("'\"'", i):
            i += 3
        elif text[i] == '"':
            end = rust_string_end(text, i)
            out.append((i + 1, end - 1))
            i = end
        else:
            i += 1
    return out


def sql_code_spans(text, a, b):
    """Spans of SQL within text[a:b], outside its own 'quoted' literals."""
    spans, start, i = [], a, a
    while i < b:
        if text[i] == "'":
            spans.append((start, i))
            i = text.index("'", i + 1) + 1
            start = i
        else:
            i += 1
    spans.append((start, b))
    return [(x, y) for x, y in spans if y > x]


SQL_SWAPS = [
    (r"(?<![<>!])=", "<>"),
    (r"<>|!=", "="),
    (r"<=", "<"),
    (r">=", ">"),
    (r"<(?![=>])", "<="),
    (r"(?<![<-])>(?!=)", ">="),
    (r"(?<!BETWEEN \S )\bAND\b", "OR"),  # not the AND of BETWEEN x AND y
    (r"\bOR\b", "AND"),
    (r"\bIS NULL\b", "IS NOT NULL"),
    (r"\bIS NOT NULL\b", "IS NULL"),
    (r"\bNOT\s+(?!NULL)", ""),
    (r"\bFALSE\b", "TRUE"),
    (r"\bTRUE\b", "FALSE"),
    (r"\bGREATEST\b", "LEAST"),
    (r"\bLEFT JOIN\b", "JOIN"),
    (r"\bIN \(", "NOT IN ("),
    (r" FOR UPDATE\b", ""),
    (r"\bBINARY ", ""),
]


def sql_conjunct_removals(path, text, a, b, item):
    """` AND x` dropped, x running to the next top-level AND/OR, a closing
    parenthesis of an outer group, or the end of the literal."""
    out = []
    for m in re.finditer(r"(?<!BETWEEN \S) AND ", text[a:b]):
        i, depth = a + m.end(), 0
        while i < b:
            c = text[i]
            if c == "'":
                i = text.index("'", i + 1)
            elif c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and re.match(r" (AND|OR|ORDER|GROUP|THEN|END)\b", text[i:b]):
                if not re.search(r"BETWEEN \S+$", text[a:i]):
                    break
            i += 1
        old = text[a + m.start() : i]
        if depth == 0:
            out.append(Mutant(path, a + m.start(), old, "", f"delete `{short(old.strip())}`", item))
    return out


def sql_mutants(path, text, functions):
    out = []
    for header in functions:
        item = header.split()[-1]  # `fn cancel_expired` -> cancel_expired
        fa, fb = item_body(text, header)
        for a, b in rust_string_contents(text, fa, fb):
            for x, y in sql_code_spans(text, a, b):
                for pattern, new in SQL_SWAPS:
                    for m in re.finditer(pattern, text[x:y]):
                        old = m.group(0)
                        what = f"replace `{old.strip()}` with `{new.strip()}`" if new else f"delete `{old.strip()}`"
                        out.append(Mutant(path, x + m.start(), old, new, what, item))
            out.extend(sql_conjunct_removals(path, text, a, b, item))
    return out


def names(mutants, text):
    """Each mutant's name, `#n` added where two would be alike (the same
    mutation on identical lines of one file), in the order of the text."""
    plain = [m.name(text) for m in mutants]
    by_key = {}  # the name without path, line and column: what verdict.py keys by
    for m, n in zip(mutants, plain):
        by_key.setdefault(n.split(": ", 1)[1], []).append(m.offset)
    out = []
    for m, n in zip(mutants, plain):
        same = sorted(by_key[n.split(": ", 1)[1]])
        out.append(m.name(text, same.index(m.offset) + 1) if len(same) > 1 else n)
    return out


def target_names(target, text=None):
    """(mutant, name) of every mutant of a target, from its file as it is."""
    text = (ROOT / target.path).read_text() if text is None else text
    ms = sql_mutants(target.path, text, target.functions) if target.functions else lua_mutants(target.path, text)
    return list(zip(ms, names(ms, text)))


def short(s):
    s = " ".join(s.split())
    return s if len(s) <= 60 else s[:57] + "..."


# ---------------------------------------------------------------- running


UNVIABLE_SIGNS = ("error in your SQL syntax", "Unknown column", "Error compiling script", "Unknown table")


def cargo_test(filters, log_path):
    cmd = ["cargo", "test", *TEST_TARGETS, "--", *filters]
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return "ok" if p.wait(timeout=TIMEOUT_S) == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return "timeout"
        except BaseException:
            # Interrupted: the tests stop with us.
            os.killpg(p.pid, signal.SIGKILL)
            raise


def script_loads(text):
    """Redis compiles the Lua (SCRIPT LOAD), or the mutant is unviable."""
    r = subprocess.run(["redis-cli", "-x", "SCRIPT", "LOAD"], input=text, capture_output=True, text=True)
    return r.returncode == 0 and not r.stdout.startswith("ERR")


def judge(target, mutant, original, log_path):
    mutated = mutant.apply(original)
    if target.path.endswith(".lua") and not script_loads(mutated):
        Path(log_path).write_text("Redis does not load the script\n")
        return "unviable"
    (ROOT / target.path).write_text(mutated)
    try:
        outcome = cargo_test(target.tests, log_path)
    finally:
        (ROOT / target.path).write_text(original)
    log = Path(log_path).read_text(errors="replace")
    if "error[E" in log or "could not compile" in log:
        return "unviable"
    if outcome == "failed" and any(s in log for s in UNVIABLE_SIGNS):
        return "unviable"
    return {"ok": "missed", "failed": "caught", "timeout": "timeout"}[outcome]


def main():
    # A TERM (a killed run) unwinds like ^C, so the mutated file is restored.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("group", choices=sorted(GROUPS))
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    ap.add_argument("--only", help="only mutants whose name contains this")
    ap.add_argument("--iterate", action="store_true", help="skip what the last run caught, found unviable or saw hang")
    args = ap.parse_args()

    out = ROOT / "mutants.out" / args.group / "mutants.out"
    logs = out / "logs"
    earlier = {}
    if args.iterate:
        # A timeout hangs the same tests again (they only grow): kept too.
        for outcome in ("caught", "previously_caught", "unviable", "timeout"):
            f = out / f"{outcome}.txt"
            earlier[outcome] = f.read_text().splitlines() if f.exists() else []
    skip = {x for names in earlier.values() for x in names}

    plan = []
    for t in GROUPS[args.group]:
        text = (ROOT / t.path).read_text()
        plan += [(t, m, n, text) for m, n in target_names(t, text) if (not args.only or args.only in n) and n not in skip]
    if args.list:
        for _, _, n, _ in plan:
            print(n)
        return 0

    if logs.exists():
        shutil.rmtree(out)
    logs.mkdir(parents=True)
    # The baseline: every test set of the group passes unmutated.
    for n, tests in enumerate(sorted({tuple(t.tests) for t in GROUPS[args.group]})):
        if cargo_test(list(tests), logs / f"baseline-{n}.log") != "ok":
            print(f"baseline failed: see {logs}/baseline-{n}.log", file=sys.stderr)
            return 1
    results = {
        "caught": [],
        "missed": [],
        "timeout": earlier.get("timeout", []),
        "unviable": earlier.get("unviable", []),
    }
    results["previously_caught"] = earlier.get("caught", []) + earlier.get("previously_caught", [])
    for n, (t, m, name, text) in enumerate(plan, 1):
        started = time.monotonic()
        outcome = judge(t, m, text, logs / f"{n:03}.log")
        results[outcome].append(name)
        print(f"[{n}/{len(plan)}] {outcome:8} {name} ({time.monotonic() - started:.0f} s)", flush=True)
    for outcome, names in results.items():
        (out / f"{outcome}.txt").write_text("".join(f"{x}\n" for x in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
