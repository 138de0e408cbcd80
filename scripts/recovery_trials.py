#!/usr/bin/env python3
"""Measures how fast one daemon of a shard comes back by itself (issue 52,
rule 19): the seat hashes back after Redis returns empty from an outage,
after a FLUSHALL and a FLUSHDB, and drift made after a refused permission
is given back, repaired. Timing goals belong here, not in tests.

    python3 scripts/recovery_trials.py [--trials 10] [--showtimes 200]
        [--binary target/release/seatflow-reconciler] [--schedule-off]

Everything runs on servers of its own: a private `redis-server` (no
persistence) on a free port in a temp dir, a database `sf_test_recovery_*`
on the local MariaDB (root, 127.0.0.1:3306), both removed at the end. The
daemon runs on its defaults (`pass.schedule = "auto"`: a pass a minute;
keyspace events are off on the private server); `--schedule-off` moves the
schedules a year away, so that only the recovery itself can start a pass
(the permission trials' lost hash is then made while the permission is
refused, since nothing but that pass could repair it).

A trial's time is from the moment Redis answers again (or the flush, or the
permission given back) to the moment every seat hash is back (polled every
50 ms with one EXISTS of every key).
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

PREFIX = "seatflow:"
SEATS = 100


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sql(statements, db=None):
    args = ["mariadb", "-uroot", "-h127.0.0.1", "-N", "-B"]
    if db:
        args.append(db)
    subprocess.run(args, input=statements, text=True, check=True, capture_output=True)


class Redis:
    """A private redis-server without persistence, restartable on its port."""

    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sf-recovery-redis-")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", self.dir, "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until(lambda: self.cli("PING", check=False) == "PONG", 30, "redis answers")

    def stop(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def cli(self, *args, check=True, user=None):
        cmd = ["redis-cli", "-p", str(self.port)]
        if user:
            cmd += ["--user", user[0], "--pass", user[1], "--no-auth-warning"]
        out = subprocess.run(cmd + list(args), capture_output=True, text=True, check=check)
        return out.stdout.strip()

    def remove(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def until(check, limit, what):
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > limit:
            raise TimeoutError(f"{what}: not within {limit} s")
        time.sleep(0.05)
    return time.monotonic() - start


class Daemon:
    def __init__(self, binary, env):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="sf-recovery-daemon-", suffix=".log", delete=False)
        env = dict(env, SEATFLOW__HTTP__LISTEN=f"127.0.0.1:{self.port}")
        self.proc = subprocess.Popen([binary, "run"], env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        until(lambda: self.get("/healthz")[0] == 200, 60, "the daemon answers")

    def get(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def ready(self):
        code, body = self.get("/readyz")
        return code == 200 and json.loads(body).get("pass", {}).get("state") == "held"

    def no_holder(self):
        code, body = self.get("/readyz")
        return code == 503 and '"no_holder"' in body

    def gaps(self, reason):
        _, body = self.get("/metrics")
        series = f'seatflow_reconcile_change_gaps_total{{reason="{reason}"}} '
        for line in body.splitlines():
            if line.startswith(series):
                return float(line.split()[-1])
        return 0.0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.log.name)


def all_back(redis, keys):
    out = redis.cli("EXISTS", *keys, check=False)
    return out.isdigit() and int(out) == len(keys)


def progress(name, times):
    print(f"  {name}: trial {len(times)}: {times[-1]:.2f} s", file=sys.stderr, flush=True)


def summary(name, times):
    times = sorted(times)
    p = lambda q: times[min(len(times) - 1, int(q * len(times)))]
    return (f"{name:<34} n={len(times):<3} min {times[0]:5.1f} s  median {statistics.median(times):5.1f} s"
            f"  p90 {p(0.9):5.1f} s  max {times[-1]:5.1f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--showtimes", type=int, default=200)
    ap.add_argument("--binary", default="target/release/seatflow-reconciler")
    ap.add_argument("--schedule-off", action="store_true",
                    help="schedules a year away: only the recovery starts passes")
    a = ap.parse_args()

    # SIGTERM runs the cleanup below, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    db = f"sf_test_recovery_{uuid.uuid4().hex[:12]}"
    redis = Redis()
    results = {}
    daemon = None
    try:
        redis.start()
        sql(f"CREATE DATABASE `{db}`")
        base = {k: v for k, v in os.environ.items() if not k.startswith("SEATFLOW__")}
        base.update(SEATFLOW__MYSQL__URL=f"mysql://root@127.0.0.1:3306/{db}",
                    SEATFLOW__REDIS__KEY_PREFIX=PREFIX,
                    SEATFLOW__LOG__LEVEL="warn")
        if a.schedule_off:
            base.update(SEATFLOW__PASS__SCHEDULE="0 0 0 1 1 *",
                        SEATFLOW__JOBS__EXPIRED_ORDERS__SCHEDULE="0 0 0 1 1 *")
        subprocess.run([a.binary, "migrate", "--reference-schema"], env=base, check=True,
                       capture_output=True)
        seats = ",".join(f"(1,'S-{i}','S',{i},1)" for i in range(1, SEATS + 1))
        shows = ",".join(f"({i},1,1,UTC_TIMESTAMP(3) + INTERVAL {60 + i} MINUTE,'ON_SALE')"
                         for i in range(1, a.showtimes + 1))
        sql("INSERT INTO hall VALUES (1,'one');"
            f"INSERT INTO hall_seat (hall_id,seat_no,row_label,col_no,enabled) VALUES {seats};"
            f"INSERT INTO showtime (id,movie_id,hall_id,starts_at,status) VALUES {shows};", db)
        keys = [f"{PREFIX}seat:{{{i}}}" for i in range(1, a.showtimes + 1)]
        # Every seat map built before the daemon starts, in one run: a fresh
        # Redis is no data loss to the daemon (nothing was there to lose),
        # so its passes would build it `batch_size` (200) hashes a minute.
        warm = dict(base, SEATFLOW__REDIS__URL=f"redis://127.0.0.1:{redis.port}",
                    SEATFLOW__JOBS__MISSING_HASHES__BATCH_SIZE=str(a.showtimes))
        subprocess.run([a.binary, "once", "--job", "missing-hashes"], env=warm, check=True,
                       capture_output=True)

        # Outages and flushes, as the default user.
        env = dict(base, SEATFLOW__REDIS__URL=f"redis://127.0.0.1:{redis.port}")
        daemon = Daemon(a.binary, env)
        until(lambda: all_back(redis, keys) and daemon.ready(), 120, "the first pass")
        for down in (2, 6):
            name = f"outage {down} s, Redis back empty"
            results[name] = []
            for _ in range(a.trials):
                time.sleep(random.uniform(0, 3))  # fall anywhere in the cycle
                redis.stop()
                time.sleep(down)
                redis.start()
                results[name].append(until(lambda: all_back(redis, keys), 120, name))
                progress(name, results[name])
                until(daemon.ready, 120, "ready again")
        for flush in ("FLUSHALL", "FLUSHDB"):
            name = flush
            results[name] = []
            for _ in range(a.trials):
                time.sleep(random.uniform(0, 3))
                before = daemon.gaps("redis_data_lost")
                redis.cli(flush)
                results[name].append(until(lambda: all_back(redis, keys), 120, name))
                progress(name, results[name])
                assert daemon.gaps("redis_data_lost") > before, "the flush was counted as a gap"
                until(daemon.ready, 120, "ready again")
        daemon.stop()
        daemon = None

        # A permission taken away and given back, as a user of its own.
        redis.cli("ACL", "SETUSER", "sfrec", "on", ">pw", "+@all", "~*", "&*")
        env = dict(base, SEATFLOW__REDIS__URL=f"redis://sfrec:pw@127.0.0.1:{redis.port}")
        daemon = Daemon(a.binary, env)
        until(lambda: all_back(redis, keys) and daemon.ready(), 120, "the first pass")
        refusals = {
            "-evalsha given back": (["-evalsha"], ["+evalsha"]),
            "key pattern given back": (["resetkeys", f"~{PREFIX}seat:*"], [f"~{PREFIX}reconcile:*"]),
        }
        for name, (take, give) in refusals.items():
            results[name] = []
            results[name + " (no holder seen)"] = []
            for _ in range(a.trials):
                time.sleep(random.uniform(0, 3))
                redis.cli("ACL", "SETUSER", "sfrec", *take)
                taken = time.monotonic()
                until(daemon.no_holder, 120, "no holder")
                results[name + " (no holder seen)"].append(time.monotonic() - taken)
                # A lost hash: made after the permission is given back (the
                # pass that follows, or the next fire, repairs it); with the
                # schedules off, while it is refused (only the pass that
                # follows can).
                lost = random.choice(keys)
                if a.schedule_off:
                    redis.cli("DEL", lost)
                redis.cli("ACL", "SETUSER", "sfrec", *give)
                given = time.monotonic()
                if not a.schedule_off:
                    redis.cli("DEL", lost)
                until(lambda: redis.cli("EXISTS", lost) == "1", 120, name)
                results[name].append(time.monotonic() - given)
                progress(name, results[name])
                until(daemon.ready, 120, "ready again")
        daemon.stop()
        daemon = None
    finally:
        if daemon:
            daemon.stop()
        redis.remove()
        sql(f"DROP DATABASE IF EXISTS `{db}`")

    mode = "schedules a year away" if a.schedule_off else "defaults (a pass a minute)"
    print(f"{a.showtimes} showtimes x {SEATS} seats, {mode}, {a.trials} trials each")
    for name, times in results.items():
        print(summary(name, times))


if __name__ == "__main__":
    sys.exit(main())
