#!/usr/bin/env bash
# Offline checks of what SREs look at: the alert rules, their unit tests and
# runbook, and the Grafana dashboard. Run from anywhere (CI runs it):
#
#   bash deploy/test/observability.sh
#
# Every file checked here is rendered from the jsonnet mixin in monitoring/
# (monitoring/render.sh); the `render` step fails when a committed copy is
# out of date.
#
# Steps (each reported PASS/FAIL; the last line is
# `observability: N passed, N failed`; exit status 1 if any failed):
#   render           monitoring/render.sh --check: the committed rule files,
#                    dashboards and Kustomize copies are what the mixin renders
#   check-rules      promtool check rules deploy/prometheus/alerts.yaml and
#                    alerts-cronjob.yaml
#   mixin-config     the mixin with another _config (several clusters, another
#                    selector) renders rules promtool accepts
#   test-rules       promtool test rules alerts_test.yaml, alerts-cronjob_test.yaml
#                    (absent series, stale pushes, passes, drift age ...)
#   dashboard-tests  promtool test rules on monitoring/tests/dashboard_test.jsonnet:
#                    dashboard queries on synthetic series (a job that never
#                    succeeded is shown, not hidden)
#   rule-style       monitoring-mixin conventions: SeatflowReconciler* CamelCase
#                    names, severity critical|warning, summary, description,
#                    runbook_url to an existing section of docs/troubleshooting.md, `for:`
#                    on every alert; every alert has a unit test where it fires
#                    and one where it does not
#   dashboard        dashboards/*.json: uid, UTC, current
#                    schema, ${datasource}/namespace/instance variables, every
#                    panel a timeseries or stat with a unit, a description and
#                    the ${datasource} data source
#   dashboard-promql every dashboard query (Grafana variables substituted)
#                    passes `promtool check rules` as a recording rule
#
# The queries against a real Prometheus, a real scrape of the binary and the
# Pushgateway are tested by `cargo test --test it observability::`.
#
# Tools: promtool (Debian package `prometheus`), jsonnet (Debian `jsonnet`)
# and python3 with PyYAML (Debian `python3-yaml`); installed with apt-get when
# missing and possible.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
alerts=$repo/deploy/prometheus/alerts.yaml
alerts_test=$repo/deploy/prometheus/alerts_test.yaml
alerts_cronjob=$repo/deploy/prometheus/alerts-cronjob.yaml
alerts_cronjob_test=$repo/deploy/prometheus/alerts-cronjob_test.yaml
runbook=$repo/docs/troubleshooting.md
dashboards=("$repo/dashboards/seatflow-reconciler.json" "$repo/dashboards/seatflow-reconciler-cronjob.json")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/seatflow-observability.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0
declare -a summary=()

log() { printf '==> %s\n' "$*"; }
warn() { printf 'observability: %s\n' "$*" >&2; }

step() { # NAME FUNCTION...
  local name=$1 t0=$SECONDS rc=0
  shift
  log "$name"
  "$@" || rc=$?
  if ((rc == 0)); then
    passed=$((passed + 1))
    summary+=("$(printf 'PASS  %-17s %3ss' "$name" $((SECONDS - t0)))")
  else
    failed=$((failed + 1))
    summary+=("$(printf 'FAIL  %-17s %3ss' "$name" $((SECONDS - t0)))")
  fi
}

as_root() {
  if [[ $(id -u) == 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi
}

apt_install() {
  command -v apt-get >/dev/null || { warn "need $* and apt-get is not available"; return 1; }
  log "apt-get install $*"
  as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

promtool=
ensure_promtool() {
  promtool=$(command -v promtool || true)
  if [[ -z $promtool ]]; then
    apt_install prometheus || { warn "promtool is missing: apt-get install prometheus"; return 1; }
    promtool=$(command -v promtool) || return 1
  fi
  echo "    $("$promtool" --version 2>&1 | head -1)"
}

python=
ensure_python_yaml() {
  local c
  for c in python3 "${SEATFLOW_DEPLOY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/seatflow-deploy}/venv/bin/python"; do
    if command -v "$c" >/dev/null && "$c" -c 'import yaml' 2>/dev/null; then
      python=$(command -v "$c")
      return 0
    fi
  done
  apt_install python3 python3-yaml || { warn "python3 with PyYAML is missing: apt-get install python3-yaml"; return 1; }
  python=$(command -v python3)
  "$python" -c 'import yaml'
}

ensure_jsonnet() {
  command -v jsonnet >/dev/null || apt_install jsonnet || { warn "jsonnet is missing: apt-get install jsonnet"; return 1; }
  echo "    $(jsonnet --version 2>&1 | head -1)"
}

step_render() {
  bash "$repo/monitoring/render.sh" --check
}

step_check_rules() {
  "$promtool" check rules "$alerts" "$alerts_cronjob"
}

# The mixin with non-default _config (several clusters, another selector,
# both modes) still renders valid rules.
step_mixin_config() {
  local mode ok=0
  for mode in daemon cronjob; do
    jsonnet -J "$repo/monitoring" -S -e "
      local m = (import 'mixin.libsonnet') + { _config+:: {
        mode: '$mode', showMultiCluster: true, selector: 'job=\"reconciler\", env=\"prod\"',
        repairSpikePerMinute: 50, sweepIntervalSeconds: 30 } };
      (import 'lib/yaml.libsonnet').manifest(m.prometheusAlerts)" >"$tmp/mixin-$mode.yaml" &&
      "$promtool" check rules "$tmp/mixin-$mode.yaml" >/dev/null &&
      grep -q 'by (cluster, namespace, job' "$tmp/mixin-$mode.yaml" || { warn "mixin with showMultiCluster ($mode) failed"; ok=1; }
  done
  return $ok
}

step_test_rules() {
  # promtool resolves rule_files relative to the test file.
  "$promtool" test rules "$alerts_test" "$alerts_cronjob_test"
}

step_dashboard_tests() {
  jsonnet -J "$repo/monitoring" -S "$repo/monitoring/tests/dashboard_test.jsonnet" >"$tmp/dashboard_test.yaml" &&
    "$promtool" test rules "$tmp/dashboard_test.yaml"
}

step_rule_style() {
  "$python" - "$alerts" "$alerts_test" "$runbook" "$alerts_cronjob" "$alerts_cronjob_test" <<'EOF'
import re, sys, yaml

alerts_path, tests_path, runbook_path, cron_path, cron_tests_path = sys.argv[1:]
problems = []
rules = [r for g in yaml.safe_load(open(alerts_path))["groups"] for r in g["rules"]]
alert_rules = [r for r in rules if "alert" in r]
cron_rules = [r for g in yaml.safe_load(open(cron_path))["groups"] for r in g["rules"] if "alert" in r]

# GitHub's anchors of the runbook's headings.
def anchor(h):
    h = re.sub(r"[^\w\- ]", "", h.strip().lower())
    return h.replace(" ", "-")
anchors = {anchor(l.lstrip("#")) for l in open(runbook_path) if l.startswith("#")}
runbook_base = "https://github.com/seatflow/seatflow-reconciler/blob/main/docs/troubleshooting.md#"

for name in ("SeatflowReconcilerDown", "SeatflowReconcilerMetricsAbsent"):
    if not any(r["alert"] == name for r in alert_rules):
        problems.append(f"{name} is missing")
# The CronJob's rules: the absent alert, no `up` (it has no scrape target).
if not any(r["alert"] == "SeatflowReconcilerMetricsAbsent" for r in cron_rules):
    problems.append("alerts-cronjob.yaml: SeatflowReconcilerMetricsAbsent is missing")
for r in alert_rules + cron_rules:
    if "alert" in r and "absent" in r["expr"] and not r["expr"].lstrip().startswith("absent"):
        problems.append(f"{r['alert']}: absent() must be the whole expression")
for r in alert_rules + cron_rules:
    name = r["alert"]
    if not re.fullmatch(r"SeatflowReconciler(?:[A-Z][a-z0-9]+)+", name):
        problems.append(f"{name}: not CamelCase with the prefix SeatflowReconciler")
    sev = (r.get("labels") or {}).get("severity")
    if sev not in ("critical", "warning"):
        problems.append(f"{name}: severity {sev!r} is not critical or warning")
    if not r.get("for"):
        problems.append(f"{name}: no `for:` duration")
    ann = r.get("annotations") or {}
    for key in ("summary", "description", "runbook_url"):
        if not str(ann.get(key, "")).strip():
            problems.append(f"{name}: no {key} annotation")
    # An absent() alert has no series labels to template.
    if "{{" not in str(ann.get("description", "")) and not r["expr"].lstrip().startswith("absent"):
        problems.append(f"{name}: description is not templated")
    url = str(ann.get("runbook_url", ""))
    if not url.startswith(runbook_base) or url[len(runbook_base):] not in anchors:
        problems.append(f"{name}: runbook_url {url!r} is not a section of docs/troubleshooting.md")
    if url[len(runbook_base):] != name.lower():
        problems.append(f"{name}: runbook_url should point at the section #{name.lower()}")

# Every alert fires in some test and is asserted not firing in another.
fires, quiet = set(), set()
for t in yaml.safe_load(open(tests_path))["tests"]:
    for c in t.get("alert_rule_test") or []:
        (fires if c.get("exp_alerts") else quiet).add(c["alertname"])
cfires, cquiet = set(), set()
for t in yaml.safe_load(open(cron_tests_path))["tests"]:
    for c in t.get("alert_rule_test") or []:
        (cfires if c.get("exp_alerts") else cquiet).add(c["alertname"])
# The CronJob's own signals are tested on pushed series.
for name in ("SeatflowReconcilerMetricsAbsent", "SeatflowReconcilerJobNotSucceeding"):
    if name not in cfires or name not in cquiet:
        problems.append(f"alerts-cronjob_test.yaml: {name} is not shown firing and not firing")
for name in sorted({r["alert"] for r in alert_rules}):
    if name not in fires:
        problems.append(f"{name}: no unit test where it fires")
    if name not in quiet:
        problems.append(f"{name}: no unit test where it does not fire")

for p in problems:
    print(f"    {p}")
print(f"    {len(alert_rules)} + {len(cron_rules)} (CronJob) alert rules ({len({r['alert'] for r in alert_rules})} names), {len(problems)} problems")
sys.exit(1 if problems else 0)
EOF
}

step_dashboard() {
  local d ok=0
  for d in "${dashboards[@]}"; do
    echo "    $(basename "$d"):"
    check_dashboard "$d" "$tmp/$(basename "$d" .json)-rules.yaml" || ok=1
  done
  return $ok
}

check_dashboard() {
  "$python" - "$1" "$2" <<'EOF'
import json, re, sys, yaml

path, rules_out = sys.argv[1:]
problems = []
d = json.load(open(path))
want_uid = path.rsplit("/", 1)[-1].removesuffix(".json")
want = {"uid": want_uid, "timezone": "utc"}
for k, v in want.items():
    if d.get(k) != v:
        problems.append(f"{k} is {d.get(k)!r}, want {v!r}")
if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 39:
    problems.append(f"schemaVersion {d.get('schemaVersion')!r} is older than 39 (Grafana 10.4)")
variables = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
ds = variables.get("datasource", {})
if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    problems.append("no `datasource` variable of type datasource/prometheus")
for name in ("namespace", "instance"):
    v = variables.get(name)
    if not v or v.get("type") != "query" or "label_values(" not in str(v.get("query")):
        problems.append(f"no `{name}` query variable")
    elif (v.get("datasource") or {}).get("uid") != "${datasource}":
        problems.append(f"variable {name} does not use ${{datasource}}")

exprs = []
for v in variables.values():
    q = v.get("query")
    if isinstance(q, dict):
        q = q.get("query")
    m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", str(q or ""))
    if v.get("type") == "query" and m:
        exprs.append((f"variable {v['name']}", m.group(1)))

# The mixin's job selector, as the namespace variable uses it.
m = re.search(r'(job(=~|=)"[^"]*")', str(variables.get("namespace", {}).get("query")))
selector = m.group(1) if m else None
if not selector:
    problems.append("the namespace variable does not use the job selector")

ids = set()
def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels") or [])
panels = list(walk(d.get("panels", [])))
for p in panels:
    title = p.get("title", "?")
    if p.get("id") in ids:
        problems.append(f"{title}: duplicate panel id {p.get('id')}")
    ids.add(p.get("id"))
    if p.get("type") == "row":
        continue
    if p.get("type") not in ("timeseries", "stat"):
        problems.append(f"{title}: type {p.get('type')!r} (timeseries or stat wanted)")
    if not str(p.get("description", "")).strip():
        problems.append(f"{title}: no description")
    if not (p.get("fieldConfig", {}).get("defaults", {}).get("unit")):
        problems.append(f"{title}: no unit")
    if (p.get("datasource") or {}).get("uid") != "${datasource}":
        problems.append(f"{title}: panel data source is not ${{datasource}}")
    if not p.get("gridPos"):
        problems.append(f"{title}: no gridPos")
    targets = p.get("targets") or []
    if not targets:
        problems.append(f"{title}: no queries")
    for t in targets:
        if (t.get("datasource") or {}).get("uid", "${datasource}") != "${datasource}":
            problems.append(f"{title}: query {t.get('refId')} data source is not ${{datasource}}")
        if not str(t.get("expr", "")).strip():
            problems.append(f"{title}: query {t.get('refId')} has no expr")
        else:
            exprs.append((f"{title} [{t.get('refId')}]", t["expr"]))
        # The binary never sets job or instance (Prometheus adds them): select
        # on instance only through the variable, and on job only through the
        # mixin's selector, the same in every query.
        for m in re.finditer(r'\b(job|instance)\s*(=~|!~|!=|=)\s*("[^"]*")', t.get("expr", "")):
            if m.group(0).replace(" ", "") not in ('instance=~"$instance"', 'instance!=""', selector):
                problems.append(f"{title}: selects on {m.group(0)!r} (only instance=~\"$instance\" and the selector {selector})")

# Grafana's variables, as Grafana would substitute them for Prometheus.
subst = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h",
         "${namespace}": ".*", "$namespace": ".*", "${instance}": ".*", "$instance": ".*"}
rules = []
for i, (where, e) in enumerate(exprs):
    for k, v in subst.items():
        e = e.replace(k, v)
    if "$" in e:
        problems.append(f"{where}: unknown Grafana variable in {e!r}")
    rules.append({"record": f"dashboard:query_{i}", "expr": e})
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(rules_out, "w"))

for p in problems:
    print(f"    {p}")
print(f"    {len(panels)} panels, {len(exprs)} queries, {len(problems)} problems")
sys.exit(1 if problems else 0)
EOF
}

step_dashboard_promql() {
  local d f ok=0
  for d in "${dashboards[@]}"; do
    f=$tmp/$(basename "$d" .json)-rules.yaml
    [[ -s $f ]] || { warn "the dashboard step wrote no queries for $(basename "$d")"; ok=1; continue; }
    "$promtool" check rules "$f" || ok=1
  done
  return $ok
}

start=$SECONDS
step tools-promtool ensure_promtool
step tools-python ensure_python_yaml
step tools-jsonnet ensure_jsonnet
command -v jsonnet >/dev/null && step render step_render
if [[ -n $promtool ]]; then
  step check-rules step_check_rules
  command -v jsonnet >/dev/null && step mixin-config step_mixin_config
  step test-rules step_test_rules
  command -v jsonnet >/dev/null && step dashboard-tests step_dashboard_tests
fi
if [[ -n $python ]]; then
  step rule-style step_rule_style
  step dashboard step_dashboard
fi
if [[ -n $promtool && -n $python ]]; then
  step dashboard-promql step_dashboard_promql
fi

echo
echo "observability checks ($((SECONDS - start))s):"
printf '  %s\n' "${summary[@]}"
echo "observability: ${passed} passed, ${failed} failed"
((failed == 0))
