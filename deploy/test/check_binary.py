#!/usr/bin/env python3
"""Runs a built seatflow-reconciler against the rendered manifests.

    check_binary.py --binary PATH daemon=FILE cronjob=FILE sidecar=FILE

For every reconciler container of every overlay:
* the real CLI accepts the container's arguments (`ARGS... --help` parses
  them and exits 0 without connecting anywhere);
* the real binary accepts the ConfigMap's config.toml (`check-config` with
  dummy connection URLs in the environment, as the Secret would provide) and
  reports the http.listen the probes and Service rely on.

Nothing is built here: CI builds the binary before (cargo test), and
validate.sh skips this step when there is none.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_manifests as cm  # noqa: E402

DUMMY_ENV = {
    "SEATFLOW__MYSQL__URL": "mysql://reconciler:dummy-password@mysql.invalid:3306/seatflow",
    "SEATFLOW__REDIS__URL": "redis://:dummy-password@redis.invalid:6379",
}


def run(binary: str, args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SEATFLOW__")}
    full_env.update(env or {})
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=30, env=full_env)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("rendered", nargs="+", metavar="OVERLAY=FILE")
    a = ap.parse_args()
    check = cm.check

    version = run(a.binary, ["--version"])
    check(version.returncode == 0, f"{a.binary} --version: {version.stdout.strip() or version.stderr.strip()}")

    with tempfile.TemporaryDirectory() as tmp:
        for item in a.rendered:
            overlay, _, file = item.partition("=")
            docs = cm.load_docs(Path(file))
            cmaps = [
                d
                for d in cm.of_kind(docs, "ConfigMap")
                if d["metadata"]["name"].startswith(f"{cm.BINARY}-config") and "config.toml" in (d.get("data") or {})
            ]
            if not check(len(cmaps) == 1, f"{overlay}: has the config ConfigMap"):
                continue
            config = Path(tmp) / f"{overlay}.toml"
            config.write_text(cmaps[0]["data"]["config.toml"])

            res = run(a.binary, ["--config", str(config), "check-config"], DUMMY_ENV)
            check(
                res.returncode == 0,
                f"{overlay}: the binary accepts the ConfigMap's config.toml (check-config exit {res.returncode}"
                f"{': ' + res.stderr.strip() if res.returncode else ''})",
            )
            check(
                re.search(r"listen\W{1,4}0\.0\.0\.0:9464\b", res.stdout) is not None,
                f"{overlay}: check-config reports http listen 0.0.0.0:9464",
            )
            check(
                "dummy-password" not in res.stdout + res.stderr,
                f"{overlay}: check-config redacts the URL passwords",
            )

            for wl, _meta, spec in cm.pod_templates(docs):
                for c, _is_init in cm.reconciler_containers(spec):
                    args = list(c.get("args") or [])
                    res = run(a.binary, [*args, "--help"])
                    check(
                        res.returncode == 0,
                        f"{overlay}: {cm.name(wl)} container {c['name']}: the CLI accepts {' '.join(args)}"
                        f"{'' if res.returncode == 0 else ' -- ' + res.stderr.strip()}",
                    )

    failed = [w for ok, w in cm.results if not ok]
    for ok, what in cm.results:
        if not ok or a.verbose:
            print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    print(f"check_binary: {len(cm.results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
