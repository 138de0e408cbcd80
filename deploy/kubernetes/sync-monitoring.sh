#!/usr/bin/env bash
# Copies the monitoring sources into components/monitoring, where Kustomize can
# load them (it refuses files outside a kustomization's directory):
#
#   deploy/prometheus/alerts.yaml        -> components/monitoring/prometheusrule.yaml
#                                           (the rule file wrapped in a PrometheusRule)
#   dashboards/seatflow-reconciler.json  -> components/monitoring/dashboards/seatflow-reconciler.json
#                                           (byte copy, for the configMapGenerator)
#
# Run it after editing either source and commit the result, so that
# `kubectl apply -k deploy/kubernetes/daemon` works from a plain checkout.
#
#   deploy/kubernetes/sync-monitoring.sh           # regenerate
#   deploy/kubernetes/sync-monitoring.sh --check   # exit 1 if out of date (CI)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

alerts_src=$repo/deploy/prometheus/alerts.yaml
dashboard_src=$repo/dashboards/seatflow-reconciler.json
rule_dst=$here/components/monitoring/prometheusrule.yaml
dashboard_dst=$here/components/monitoring/dashboards/seatflow-reconciler.json

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

for f in "$alerts_src" "$dashboard_src"; do
  [[ -f $f ]] || { echo "sync-monitoring: missing $f" >&2; exit 1; }
done

# A rule file is one YAML mapping ({groups: [...]}); indented by two spaces it
# becomes the PrometheusRule's spec, comments and block scalars included.
# Document markers are dropped. deploy/test/check_manifests.py verifies that
# the rendered spec equals the rule file.
render_rule() {
  cat <<'EOF'
# GENERATED from deploy/prometheus/alerts.yaml by
# deploy/kubernetes/sync-monitoring.sh: edit the source, then rerun it.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: seatflow-reconciler
  labels:
    app.kubernetes.io/name: seatflow-reconciler
spec:
EOF
  awk '/^(---|\.\.\.)[[:space:]]*$/ { next } /^[[:space:]]*$/ { print ""; next } { print "  " $0 }' "$alerts_src"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
render_rule >"$tmp/prometheusrule.yaml"
cp "$dashboard_src" "$tmp/seatflow-reconciler.json"

stale=0
for pair in "$tmp/prometheusrule.yaml:$rule_dst" "$tmp/seatflow-reconciler.json:$dashboard_dst"; do
  new=${pair%%:*} dst=${pair#*:}
  if cmp -s "$new" "$dst"; then
    continue
  fi
  if $check; then
    echo "sync-monitoring: ${dst#"$repo"/} is out of date" >&2
    stale=1
  else
    mkdir -p "$(dirname "$dst")"
    cp "$new" "$dst"
    echo "sync-monitoring: wrote ${dst#"$repo"/}"
  fi
done

if ((stale)); then
  echo "sync-monitoring: run deploy/kubernetes/sync-monitoring.sh and commit the result" >&2
  exit 1
fi
