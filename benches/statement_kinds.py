#!/usr/bin/env python3
"""Where a phase's MySQL time goes, statement kind by statement kind.

Reads the slow-query logs `seatflow-bench --statement-log DIR` writes (one per
measured phase; MariaDB with `long_query_time = 0` and `log_slow_verbosity =
query_plan,innodb`) and prints, per file and per kind of statement: how many,
their summed wall time (`Query_time`: for a streamed read, also the time the
client took to take the rows), rows examined and sent, and InnoDB pages
accessed and read from disk (`Pages_read`; the read-ahead's pages apart, as
`Pages_prefetched`).

    python3 benches/statement_kinds.py DIR/100000-run1-*.log [--markdown]
"""

import re
import sys
from collections import OrderedDict

# (kind, pattern on the statement with whitespace collapsed), first match wins.
KINDS = [
    ("occupancy read (pass)", r"^SELECT os\.showtime_id, os\.order_id, os\.seat_no, .* FROM order_seat os LEFT JOIN ticket_order o ON o\.id = os\.order_id WHERE NOT \(os\.active IS NULL"),
    ("occupancy: rows of a chunk", r"^SELECT os\.showtime_id, os\.order_id, os\.seat_no, CAST\(os\.active AS SIGNED\) AS active FROM order_seat os WHERE"),
    ("occupancy: bounds of a chunk's orders", r"^SELECT MIN\(o\.id\), MAX\(o\.id\)(, COUNT\(\*\))? FROM ticket_order"),
    ("occupancy: orders by id", r"^SELECT o\.id, CAST\(o\.status AS BINARY\).* FROM ticket_order o WHERE TRUE AND o\.id IN"),
    ("occupancy: orders of a chunk", r"^SELECT o\.id, CAST\(o\.status AS BINARY\).* FROM ticket_order o WHERE"),
    ("occupancy: snapshot (begin, commit)", r"^(START TRANSACTION WITH CONSISTENT SNAPSHOT|COMMIT$|SET TRANSACTION ISOLATION)"),
    ("confirmation: rows elsewhere", r"mine\.showtime_id AS asked_showtime"),
    ("confirmation elsewhere: the showtimes' orders", r"^SELECT o\.id, o\.showtime_id FROM ticket_order o WHERE"),
    ("confirmation elsewhere: rows in their id range", r"^SELECT os\.order_id, os\.showtime_id FROM order_seat os WHERE os\.order_id BETWEEN"),
    ("confirmation: rows in the showtime", r"os\.showtime_id AS asked_showtime"),
    ("confirmation: rows with no showtime", r"o\.showtime_id AS asked_showtime"),
    ("seat names (collation)", r"AS pos FROM order_seat os WHERE os\.order_id ="),
    ("page of showtimes", r"^SELECT (s\.)?id, (s\.)?hall_id, (s\.)?starts_at FROM (showtime|\(SELECT id FROM showtime)"),
    ("showtimes outside the contract", r"^SELECT id, CAST\(status AS BINARY\)"),
    ("templates", r"^SELECT hall_id, seat_no, CAST\(enabled"),
    ("audit rows (INSERT reconcile_fix)", r"^INSERT INTO reconcile_fix"),
    ("run row (reconcile_run)", r"reconcile_run"),
    ("schema read", r"information_schema|SHOW (FULL )?COLUMNS|SHOW INDEX|SHOW GRANTS|@@"),
    ("floor: all occupancy", r"^SELECT os\.showtime_id, os\.seat_no, o\.status FROM order_seat os JOIN ticket_order o ON o\.id = os\.order_id WHERE os\.active = 1 AND o\.status IN \('PENDING', 'PAID'\)$"),
    ("verification: occupancy", r"^SELECT os\.showtime_id, os\.seat_no, o\.status FROM order_seat os JOIN ticket_order o .* AND os\.showtime_id >="),
    ("loop: a showtime's occupancy", r"^SELECT os\.seat_no, o\.status FROM order_seat os JOIN ticket_order o"),
    ("loop: showtimes, templates", r"^SELECT (id, hall_id FROM showtime|seat_no FROM hall_seat)"),
    ("benchmark's counters", r"^SHOW GLOBAL STATUS|^SELECT VERSION|^SET GLOBAL"),
]
COMPILED = [(k, re.compile(p)) for k, p in KINDS]
NUMBERS = re.compile(r"([A-Za-z_]+): ([0-9.]+)")


def entries(path):
    """(fields, statement) per logged statement."""
    fields, sql = {}, []
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("# Time:"):
                continue
            if line.startswith("# User@Host:"):
                if sql:
                    yield fields, " ".join(sql)
                fields, sql = {}, []
                continue
            if line.startswith("#"):
                for k, v in NUMBERS.findall(line):
                    fields[k] = float(v)
                continue
            if line.startswith(("SET timestamp=", "use ")) or not fields:
                continue
            sql.append(line.strip())
    if sql:
        yield fields, " ".join(sql)


def kind_of(sql):
    sql = re.sub(r"\s+", " ", sql).strip().rstrip(";")
    for kind, pattern in COMPILED:
        if pattern.search(sql):
            return kind
    return "other: " + sql[:60]


def summarise(path):
    kinds = OrderedDict()
    for fields, sql in entries(path):
        k = kinds.setdefault(kind_of(sql), dict(n=0, time=0.0, examined=0, sent=0, accessed=0, read=0, prefetched=0))
        k["n"] += 1
        k["time"] += fields.get("Query_time", 0.0)
        k["examined"] += int(fields.get("Rows_examined", 0))
        k["sent"] += int(fields.get("Rows_sent", 0))
        k["accessed"] += int(fields.get("Pages_accessed", 0))
        k["read"] += int(fields.get("Pages_read", 0))
        k["prefetched"] += int(fields.get("Pages_prefetched", 0))
    return kinds


def main():
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    markdown = "--markdown" in sys.argv
    if not paths:
        print(__doc__)
        return 2
    cols = ["statements", "wall s", "rows examined", "rows sent", "pages accessed", "pages from disk", "prefetched"]
    for path in paths:
        kinds = summarise(path)
        total = {c: 0 for c in ("n", "time", "examined", "sent", "accessed", "read", "prefetched")}
        print(f"\n{path}")
        if markdown:
            print("| kind | " + " | ".join(cols) + " |")
            print("|---|" + "---:|" * len(cols))
        else:
            print(f"{'kind':<40}" + "".join(f"{c:>16}" for c in cols))
        for kind, k in sorted(kinds.items(), key=lambda kv: -kv[1]["time"]):
            for c in total:
                total[c] += k[c]
            row = [f"{k['n']:,}", f"{k['time']:.2f}", f"{k['examined']:,}", f"{k['sent']:,}", f"{k['accessed']:,}", f"{k['read']:,}", f"{k['prefetched']:,}"]
            if markdown:
                print(f"| {kind} | " + " | ".join(row) + " |")
            else:
                print(f"{kind:<40}" + "".join(f"{v:>16}" for v in row))
        row = [f"{total['n']:,}", f"{total['time']:.2f}", f"{total['examined']:,}", f"{total['sent']:,}", f"{total['accessed']:,}", f"{total['read']:,}", f"{total['prefetched']:,}"]
        if markdown:
            print("| **all** | " + " | ".join(row) + " |")
        else:
            print(f"{'all':<40}" + "".join(f"{v:>16}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
