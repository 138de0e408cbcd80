#!/usr/bin/env python3
"""Consistency checks of the rendered Kubernetes manifests against the binary.

    check_manifests.py --repo DIR daemon=FILE cronjob=FILE sidecar=FILE

FILE is the output of `kubectl kustomize deploy/kubernetes/<overlay>`. The
checks tie the manifests to what the binary really does:

* the HTTP port: `http.listen` of config/default.toml overridden by the
  ConfigMap's config.toml must listen on all interfaces on 9464, and every
  container port, probe, Service, ServiceMonitor and PodMonitor must reach it;
* probes: liveness GET /healthz, readiness GET /readyz (not on a native
  sidecar, whose readiness would gate the application pod's);
* config: the ConfigMap is mounted and passed with --config, and names only
  keys that config/default.toml has (the binary rejects unknown keys);
* secrets: SEATFLOW__MYSQL__URL and SEATFLOW__REDIS__URL come from a Secret;
* restricted pod security and resources on every reconciler container;
* the CronJob's run controls, the native sidecar, and the monitoring objects
  (PrometheusRule == deploy/prometheus/alerts.yaml, dashboard ==
  dashboards/seatflow-reconciler.json; for the CronJob alerts-cronjob.yaml
  and seatflow-reconciler-cronjob.json; the `release` label);
* the Dockerfile: `cargo build --release --locked`, non-root, ENTRYPOINT/CMD
  and EXPOSE of the same port.

Prints one line per check and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import sys
from pathlib import Path

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

EXPECTED_PORT = 9464  # the documented port: spec, Dockerfile EXPOSE, dashboards
BINARY = "seatflow-reconciler"
CONFIG_DIR = "/etc/seatflow-reconciler"
CONFIG_FILE = f"{CONFIG_DIR}/config.toml"
SECRET_ENV = ("SEATFLOW__MYSQL__URL", "SEATFLOW__REDIS__URL")
MONITORING_GROUP = "monitoring.coreos.com"

CREDENTIAL_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@", re.I)

results: list[tuple[bool, str]] = []


def check(ok: bool, what: str) -> bool:
    results.append((bool(ok), what))
    return bool(ok)


# --------------------------------------------------------------------------
# Loading


def load_docs(path: Path) -> list[dict]:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d]


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind]


def name(doc: dict) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def pod_templates(docs: list[dict]):
    """(workload, pod metadata, pod spec) for every pod-creating object."""
    for d in docs:
        kind = d.get("kind")
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"):
            t = d["spec"]["template"]
            yield d, t.get("metadata", {}), t["spec"]
        elif kind == "CronJob":
            t = d["spec"]["jobTemplate"]["spec"]["template"]
            yield d, t.get("metadata", {}), t["spec"]
        elif kind == "Pod":
            yield d, d["metadata"], d["spec"]


def reconciler_containers(spec: dict):
    """(container, is_init) for the containers that run our binary."""
    for is_init, key in ((True, "initContainers"), (False, "containers")):
        for c in spec.get(key) or []:
            if image_repository(c.get("image", "")).rsplit("/", 1)[-1] == BINARY:
                yield c, is_init


def image_repository(image: str) -> str:
    """registry/path/name of an image reference, without tag or digest."""
    image = image.split("@", 1)[0]
    head, sep, tail = image.rpartition(":")
    return head if sep and "/" not in tail else image


def subcommand(c: dict) -> str | None:
    args = list(c.get("args") or [])
    # Global option --config FILE may come first; the first bare word is the command.
    i = 0
    while i < len(args):
        if args[i] == "--config":
            i += 2
            continue
        if args[i].startswith("--config="):
            i += 1
            continue
        return args[i]
    return None


def strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)


def selector_matches(selector: dict, labels: dict) -> bool:
    ml = selector.get("matchLabels") or {}
    if not ml and not selector.get("matchExpressions"):
        return False  # we never want an empty (select-all) selector here
    if any(labels.get(k) != v for k, v in ml.items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        k, op, vals = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and labels.get(k) in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


# --------------------------------------------------------------------------
# The binary's configuration


def flatten(table: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def parse_duration(value: str) -> float:
    """The binary's duration strings: "500ms", "30s", "2m", "1h"."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", value.strip())
    if not m:
        raise ValueError(f"not a duration: {value!r}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def parse_listen(value: str) -> tuple[str, int]:
    m = re.fullmatch(r"\[?([^\[\]]+?)\]?:(\d+)", value)
    if not m:
        raise ValueError(f"http.listen {value!r} is not host:port")
    return m.group(1), int(m.group(2))


def effective_config(overlay: str, repo: Path, docs: list[dict]) -> tuple[dict | None, dict, str | None]:
    """(override ConfigMap, effective flattened settings, configmap name)."""
    defaults = flatten(tomllib.loads((repo / "config/default.toml").read_text()))
    cms = [
        d
        for d in of_kind(docs, "ConfigMap")
        if d["metadata"]["name"].startswith(f"{BINARY}-config") and "config.toml" in (d.get("data") or {})
    ]
    if not check(len(cms) == 1, f"{overlay}: one ConfigMap seatflow-reconciler-config with config.toml"):
        return None, defaults, None
    override = flatten(tomllib.loads(cms[0]["data"]["config.toml"]))
    unknown = sorted(set(override) - set(defaults))
    check(not unknown, f"{overlay}: ConfigMap config.toml sets only keys of config/default.toml (unknown: {unknown or 'none'})")
    check(
        not any(k in override for k in ("mysql.url", "redis.url", "redis.cluster_urls", "http.admin_token")),
        f"{overlay}: ConfigMap config.toml holds no URL or token (they belong in the Secret)",
    )
    eff = dict(defaults)
    eff.update(override)
    return cms[0], eff, cms[0]["metadata"]["name"]


# --------------------------------------------------------------------------
# Per-container checks


def check_security(overlay: str, wl: dict, spec: dict, c: dict) -> None:
    where = f"{overlay}: {name(wl)} container {c['name']}"
    psc = spec.get("securityContext") or {}
    csc = c.get("securityContext") or {}

    def eff(key):
        return csc.get(key, psc.get(key))

    seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
    run_as_user = eff("runAsUser")
    check(
        eff("runAsNonRoot") is True and run_as_user not in (None, 0),
        f"{where}: runAsNonRoot with a non-zero runAsUser",
    )
    check(csc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation false")
    check(csc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem")
    check(csc.get("privileged") in (None, False), f"{where}: not privileged")
    check("ALL" in ((csc.get("capabilities") or {}).get("drop") or []), f"{where}: capabilities drop ALL")
    check(not (csc.get("capabilities") or {}).get("add"), f"{where}: no capabilities added")
    check(seccomp == "RuntimeDefault", f"{where}: seccomp RuntimeDefault")
    res = c.get("resources") or {}
    check(
        all(k in (res.get("requests") or {}) for k in ("cpu", "memory"))
        and all(k in (res.get("limits") or {}) for k in ("cpu", "memory")),
        f"{where}: cpu and memory requests and limits",
    )
    check(spec.get("automountServiceAccountToken") is False, f"{where}: no service account token mounted")
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        check(not spec.get(flag), f"{where}: no {flag}")


def check_config_and_secrets(overlay: str, wl: dict, spec: dict, c: dict, cm_name: str | None) -> None:
    where = f"{overlay}: {name(wl)} container {c['name']}"
    args = c.get("args") or []
    check(c.get("command") in (None, []), f"{where}: uses the image ENTRYPOINT (no command override)")
    check(args[:2] == ["--config", CONFIG_FILE], f"{where}: passes --config {CONFIG_FILE}")
    mounts = [m for m in c.get("volumeMounts") or [] if m.get("mountPath") == CONFIG_DIR]
    vols = {v["name"]: v for v in spec.get("volumes") or []}
    ok = False
    if mounts:
        vol = vols.get(mounts[0]["name"], {})
        cm = (vol.get("configMap") or {}).get("name")
        items = (vol.get("configMap") or {}).get("items")
        ok = cm == cm_name and (items is None or any(i.get("path") == "config.toml" for i in items))
        check(mounts[0].get("readOnly") is True, f"{where}: config mounted read-only")
    check(ok, f"{where}: {CONFIG_DIR} is the ConfigMap {cm_name}")
    env = {e["name"]: e for e in c.get("env") or []}
    for var in SECRET_ENV:
        ref = ((env.get(var) or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
        check(bool(ref.get("name") and ref.get("key")), f"{where}: {var} from a secretKeyRef")
    plain = [e["name"] for e in c.get("env") or [] if "://" in str(e.get("value", ""))]
    check(not plain, f"{where}: no URL in a plain env value ({plain or 'none'})")
    check(not c.get("envFrom"), f"{where}: no envFrom (every variable is explicit)")


def resolve_container_port(c: dict, port) -> int | None:
    if isinstance(port, int):
        return port
    for p in c.get("ports") or []:
        if p.get("name") == port:
            return p.get("containerPort")
    return None


def check_http(overlay: str, wl: dict, c: dict, port: int, native_sidecar: bool) -> None:
    where = f"{overlay}: {name(wl)} container {c['name']}"
    ports = [p for p in c.get("ports") or [] if p.get("containerPort") == port]
    check(
        len(ports) == 1 and ports[0].get("name") and ports[0].get("protocol", "TCP") == "TCP",
        f"{where}: named TCP containerPort {port}",
    )
    for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        probe = c.get(kind)
        if kind == "readinessProbe" and native_sidecar:
            # A native sidecar's readiness is part of the pod's: /readyz would
            # take the application out of its Service when MySQL or Redis blips.
            check(probe is None, f"{where}: no readinessProbe on the native sidecar (it would gate the app pod)")
            continue
        get = (probe or {}).get("httpGet") or {}
        check(
            get.get("path") == path and resolve_container_port(c, get.get("port")) == port,
            f"{where}: {kind} GET {path} on port {port}",
        )
    startup = (c.get("startupProbe") or {}).get("httpGet")
    if startup:
        check(resolve_container_port(c, startup.get("port")) == port, f"{where}: startupProbe on port {port}")


# --------------------------------------------------------------------------
# Per-overlay checks


def check_overlay(overlay: str, docs: list[dict], repo: Path, images: dict) -> None:
    cm, eff, cm_name = effective_config(overlay, repo, docs)
    try:
        host, port = parse_listen(str(eff["http.listen"]))
        all_interfaces = ipaddress.ip_address(host).is_unspecified
    except ValueError as e:
        check(False, f"{overlay}: http.listen parses: {e}")
        return
    check(all_interfaces, f"{overlay}: effective http.listen {eff['http.listen']} listens on all interfaces")
    check(port == EXPECTED_PORT, f"{overlay}: effective http.listen port is {EXPECTED_PORT} (got {port})")

    ns = {d["metadata"].get("namespace") for d in docs}
    check(len(ns) == 1 and None not in ns, f"{overlay}: every object in one explicit namespace ({ns})")

    found = {"run": 0, "once": 0, "migrate": 0}
    http_containers = []  # (workload, pod labels, container)
    for wl, meta, spec in pod_templates(docs):
        for c, is_init in reconciler_containers(spec):
            images.setdefault(c["image"], []).append(f"{overlay}:{c['name']}")
            cmd = subcommand(c)
            check(cmd in found, f"{overlay}: {name(wl)} container {c['name']} runs a known command ({cmd})")
            if cmd in found:
                found[cmd] += 1
            check_security(overlay, wl, spec, c)
            check_config_and_secrets(overlay, wl, spec, c, cm_name)
            native_sidecar = is_init and c.get("restartPolicy") == "Always"
            if cmd == "run":
                check(
                    not is_init or native_sidecar,
                    f"{overlay}: {name(wl)} `run` is a container or a native sidecar (initContainers with restartPolicy: Always)",
                )
                grace = spec.get("terminationGracePeriodSeconds", 30)
                shutdown = parse_duration(str(eff.get("daemon.shutdown_timeout", "0s")))
                check(
                    grace >= shutdown + 10,
                    f"{overlay}: {name(wl)} terminationGracePeriodSeconds {grace} leaves daemon.shutdown_timeout"
                    f" ({shutdown:g}s) and 10s to spare",
                )
                check_http(overlay, wl, c, port, native_sidecar)
                http_containers.append((wl, meta.get("labels") or {}, c))
            elif cmd == "migrate":
                # Once per rollout: a Deployment's plain init container (the
                # daemon's start) or a Job of its own, never in a CronJob's
                # pods (a pod a minute with DDL rights).
                check(
                    (wl["kind"] != "CronJob" and is_init and not native_sidecar) or (wl["kind"] == "Job" and not is_init),
                    f"{overlay}: {name(wl)} runs `migrate` once per rollout (an init container of the daemon, or a Job), not in a CronJob",
                )
            elif cmd == "once":
                args = c.get("args") or []
                i = args.index("--pushgateway") if "--pushgateway" in args else -1
                check(
                    i >= 0 and i + 1 < len(args) and re.match(r"https?://", args[i + 1]),
                    f"{overlay}: {name(wl)} `once --pushgateway URL`",
                )
                check(not c.get("ports") and not c.get("livenessProbe"), f"{overlay}: `once` declares no port or probe (it serves no HTTP)")

    services = of_kind(docs, "Service")
    for svc in services:
        for p in svc["spec"].get("ports") or []:
            backends = [
                c for wl, labels, c in http_containers if selector_matches({"matchLabels": svc["spec"].get("selector")}, labels)
            ]
            target = p.get("targetPort", p.get("port"))
            check(
                bool(backends) and all(resolve_container_port(c, target) == port for c in backends),
                f"{overlay}: {name(svc)} port {p.get('name')} ({p.get('port')}) -> targetPort {target} reaches containerPort {port}",
            )
            check(p.get("port") == port, f"{overlay}: {name(svc)} port {p.get('name')} is {port}")

    for sm in of_kind(docs, "ServiceMonitor"):
        selected = [s for s in services if selector_matches(sm["spec"]["selector"], s["metadata"].get("labels") or {})]
        check(bool(selected), f"{overlay}: {name(sm)} selects a Service")
        for ep in sm["spec"].get("endpoints") or []:
            ok = False
            for s in selected:
                for p in s["spec"]["ports"]:
                    if p.get("name") == ep.get("port"):
                        ok = p.get("port") == port
            check(ok, f"{overlay}: {name(sm)} endpoint port {ep.get('port')!r} is the Service's port {port}")
            check(ep.get("path", "/metrics") == "/metrics", f"{overlay}: {name(sm)} scrapes /metrics")

    for pm in of_kind(docs, "PodMonitor"):
        targets = [c for wl, labels, c in http_containers if selector_matches(pm["spec"]["selector"], labels)]
        check(bool(targets), f"{overlay}: {name(pm)} selects pods that run the reconciler")
        for ep in pm["spec"].get("podMetricsEndpoints") or []:
            check(
                bool(targets) and all(resolve_container_port(c, ep.get("port")) == port for c in targets),
                f"{overlay}: {name(pm)} port {ep.get('port')!r} is the reconciler's containerPort {port}",
            )
            check(ep.get("path", "/metrics") == "/metrics", f"{overlay}: {name(pm)} scrapes /metrics")

    for d in docs:
        if d["apiVersion"].startswith(MONITORING_GROUP + "/"):
            check(
                bool((d["metadata"].get("labels") or {}).get("release")),
                f"{overlay}: {name(d)} has the kube-prometheus-stack `release` label",
            )

    for pdb in of_kind(docs, "PodDisruptionBudget"):
        check(
            any(selector_matches(pdb["spec"]["selector"], labels) for _, labels, _ in http_containers),
            f"{overlay}: {name(pdb)} selects the reconciler pods",
        )

    for np_ in of_kind(docs, "NetworkPolicy"):
        pods = [
            (wl, meta.get("labels") or {}, spec)
            for wl, meta, spec in pod_templates(docs)
            if selector_matches(np_["spec"]["podSelector"], meta.get("labels") or {})
        ]
        check(bool(pods), f"{overlay}: {name(np_)} selects pods")
        check(set(np_["spec"].get("policyTypes") or []) == {"Ingress", "Egress"}, f"{overlay}: {name(np_)} restricts ingress and egress")
        egress_ports = {p.get("port") for rule in np_["spec"].get("egress") or [] for p in rule.get("ports") or []}
        check({53, 3306, 6379} <= egress_ports, f"{overlay}: {name(np_)} lets DNS, MySQL and Redis out")
        for wl, labels, c in http_containers:
            if selector_matches(np_["spec"]["podSelector"], labels):
                ingress_ports = [
                    resolve_container_port(c, p.get("port"))
                    for rule in np_["spec"].get("ingress") or []
                    for p in rule.get("ports") or []
                ]
                check(port in ingress_ports, f"{overlay}: {name(np_)} lets scrapes in on {port}")

    # No credentials anywhere: a URL with user:password@ in any string.
    leaks = sorted({f"{name(d)}" for d in docs for v in strings(d) if CREDENTIAL_URL.search(v)})
    check(not leaks, f"{overlay}: no URL with a password in any object ({leaks or 'none'})")
    check(not of_kind(docs, "Secret"), f"{overlay}: ships no Secret (it is created out of band)")

    # What the overlay must contain.
    kinds = sorted({d["kind"] for d in docs})
    if overlay == "daemon":
        want = {"Deployment", "Service", "ServiceMonitor", "PrometheusRule", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy"}
        check(want <= set(kinds), f"daemon: has {sorted(want)} (has {kinds})")
        check(found["run"] >= 1, "daemon: runs `run`")
        for dep in of_kind(docs, "Deployment"):
            check(
                dep["spec"].get("replicas", 1) >= 2,
                f"daemon: {name(dep)} has at least 2 replicas (the PodDisruptionBudget allows 1 down)",
            )
    elif overlay == "statefulset":
        want = {"StatefulSet", "Service", "ServiceMonitor", "PrometheusRule", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy"}
        check(want <= set(kinds), f"statefulset: has {sorted(want)} (has {kinds})")
        check(found["run"] >= 1, "statefulset: runs `run`")
        for sts in of_kind(docs, "StatefulSet"):
            replicas = sts["spec"].get("replicas", 1)
            env = {
                e["name"]: e.get("value")
                for c, _ in reconciler_containers(sts["spec"]["template"]["spec"])
                for e in c.get("env") or []
            }
            check(
                env.get("SEATFLOW__SHARDING__TOTAL") == str(replicas),
                f"statefulset: {name(sts)} sharding.total ({env.get('SEATFLOW__SHARDING__TOTAL')}) equals its replicas ({replicas})",
            )
            check(
                env.get("SEATFLOW__SHARDING__INDEX") == "-1",
                f"statefulset: {name(sts)} takes each pod's shard from its ordinal (sharding.index = -1)",
            )
            services = {s_["metadata"]["name"]: s_ for s_ in of_kind(docs, "Service")}
            governing = services.get(sts["spec"].get("serviceName"))
            check(
                governing is not None and governing["spec"].get("clusterIP") == "None",
                f"statefulset: {name(sts)} has a headless governing Service",
            )
    elif overlay == "cronjob":
        cjs = of_kind(docs, "CronJob")
        check(len(cjs) == 1 and found["once"] == 1, "cronjob: one CronJob running `once`")
        jobs = [j for j in of_kind(docs, "Job") if any(subcommand(c) == "migrate" for c, _ in reconciler_containers(j["spec"]["template"]["spec"]))]
        check(len(jobs) == 1 and found["migrate"] == 1, "cronjob: migrations run once per rollout, by one Job (not in every CronJob pod)")
        for cj in cjs:
            s, js = cj["spec"], cj["spec"]["jobTemplate"]["spec"]
            check(s.get("concurrencyPolicy") == "Forbid", f"cronjob: {name(cj)} concurrencyPolicy Forbid")
            for key, where in (
                ("startingDeadlineSeconds", s),
                ("backoffLimit", js),
                ("activeDeadlineSeconds", js),
                ("ttlSecondsAfterFinished", js),
            ):
                check(isinstance(where.get(key), int), f"cronjob: {name(cj)} sets {key}")
            check(
                js["template"]["spec"].get("restartPolicy") == "Never",
                f"cronjob: {name(cj)} restartPolicy Never (a failed run is a failed pod)",
            )
    elif overlay == "sidecar":
        check(found["run"] == 1, "sidecar: one reconciler `run`")
        for wl, meta, spec in pod_templates(docs):
            sidecars = [c for c, is_init in reconciler_containers(spec) if is_init and c.get("restartPolicy") == "Always"]
            others = [c for c in spec.get("containers") or [] if c not in [x for x, _ in reconciler_containers(spec)]]
            check(
                len(sidecars) == 1 and len(others) >= 1,
                f"sidecar: {name(wl)} runs the reconciler as a native sidecar beside the app",
            )

    # Monitoring objects, wherever present.
    rules_file = "deploy/prometheus/alerts-cronjob.yaml" if overlay == "cronjob" else "deploy/prometheus/alerts.yaml"
    dashboard_file = "dashboards/seatflow-reconciler-cronjob.json" if overlay == "cronjob" else "dashboards/seatflow-reconciler.json"
    check(len(of_kind(docs, "PrometheusRule")) == 1, f"{overlay}: ships one PrometheusRule")
    for pr in of_kind(docs, "PrometheusRule"):
        source = yaml.safe_load((repo / rules_file).read_text())
        check(pr.get("spec") == source, f"{overlay}: {name(pr)} spec equals {rules_file}")
        alerts = {r.get("alert") for g in (pr.get("spec") or {}).get("groups") or [] for r in g.get("rules") or []}
        check("SeatflowReconcilerMetricsAbsent" in alerts, f"{overlay}: {name(pr)} alerts when the reconciler's series are absent")
        groups = (pr.get("spec") or {}).get("groups") or []
        rules_ok = bool(groups) and all(
            g.get("name") and g.get("rules") and all((r.get("alert") or r.get("record")) and r.get("expr") for r in g["rules"])
            for g in groups
        )
        check(rules_ok, f"{overlay}: {name(pr)} groups have names and rules with alert/record and expr")
    dashboards = [d for d in of_kind(docs, "ConfigMap") if (d["metadata"].get("labels") or {}).get("grafana_dashboard") == "1"]
    check(len(dashboards) == 1, f"{overlay}: one Grafana dashboard ConfigMap (label grafana_dashboard: \"1\")")
    source_json = json.loads((repo / dashboard_file).read_text())
    uid = Path(dashboard_file).stem
    for cmap in dashboards:
        data = cmap.get("data") or {}
        ok = len(data) == 1
        for text in data.values():
            ok = ok and json.loads(text) == source_json and source_json.get("uid") == uid
        check(ok, f"{overlay}: {name(cmap)} holds {dashboard_file} (uid {uid})")


# --------------------------------------------------------------------------
# Dockerfile


def check_dockerfile(repo: Path) -> None:
    text = (repo / "deploy/docker/Dockerfile").read_text()
    # Join continuation lines, drop comments.
    lines = re.sub(r"\\\n", " ", text).splitlines()
    instr = [l.strip() for l in lines if l.strip() and not l.strip().startswith("#")]
    froms = [l for l in instr if l.upper().startswith("FROM ")]
    check(len(froms) >= 2, "Dockerfile: multi-stage")
    runs = " ".join(l for l in instr if l.upper().startswith("RUN "))
    check(
        re.search(r"cargo build --release --locked(\s|$)", runs) is not None and "--features" not in runs and "--profile" not in runs,
        "Dockerfile: the build stage is a plain `cargo build --release --locked`",
    )
    cargo = tomllib.loads((repo / "Cargo.toml").read_text())
    bins = [b["name"] for b in cargo.get("bin") or []] or [cargo["package"]["name"]]
    check(BINARY in bins, f"Dockerfile: Cargo.toml builds the binary {BINARY}")
    check(f"target/release/{BINARY}" in runs, f"Dockerfile: copies target/release/{BINARY}")
    check(
        re.search(rf"cargo build [^&;]*(-p|--package) {BINARY}(\s|$)", runs) is not None,
        f"Dockerfile: builds the product package only (-p {BINARY}), not the benchmark",
    )
    final = instr[instr.index(froms[-1]):]
    users = [l.split(None, 1)[1] for l in final if l.upper().startswith("USER ")]
    check(
        bool(users) and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0",
        "Dockerfile: runtime stage runs as a numeric non-root USER",
    )
    check(f'ENTRYPOINT ["/{BINARY}"]' in final, f'Dockerfile: ENTRYPOINT ["/{BINARY}"]')
    check('CMD ["run"]' in final, 'Dockerfile: CMD ["run"]')
    exposed = [l.split()[1].split("/")[0] for l in final if l.upper().startswith("EXPOSE ")]
    check(exposed == [str(EXPECTED_PORT)], f"Dockerfile: EXPOSE {EXPECTED_PORT}")
    check(not any(l.upper().startswith(("RUN ", "SHELL ")) for l in final), "Dockerfile: runtime stage runs nothing (no shell needed)")
    ignore = [
        l.strip() for l in (repo / ".dockerignore").read_text().splitlines() if l.strip() and not l.strip().startswith("#")
    ]
    check(any(p.rstrip("/") in ("target", "**/target", "/target") for p in ignore), ".dockerignore: excludes target/")
    check(".git" in ignore, ".dockerignore: excludes .git")
    needed = ["Cargo.toml", "Cargo.lock", "src", "config", "migrations"]
    check(not [n for n in needed if n in ignore], f".dockerignore: keeps {needed} (compiled in)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("-v", "--verbose", action="store_true", help="print passing checks too")
    ap.add_argument("rendered", nargs="+", metavar="OVERLAY=FILE")
    a = ap.parse_args()

    images: dict[str, list[str]] = {}
    for item in a.rendered:
        overlay, _, file = item.partition("=")
        check_overlay(overlay, load_docs(Path(file)), a.repo, images)
    check(len(images) == 1, f"every overlay runs the same reconciler image ({sorted(images)})")
    check_dockerfile(a.repo)

    failed = [w for ok, w in results if not ok]
    for ok, what in results:
        if not ok or a.verbose:
            print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    print(f"check_manifests: {len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
