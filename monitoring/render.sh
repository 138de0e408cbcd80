#!/usr/bin/env bash
# Renders the monitoring mixin (monitoring/*.libsonnet) into the files the
# repository ships: rule files, Grafana dashboards and the Kustomize
# components' copies (the list is monitoring/render.jsonnet).
#
#   monitoring/render.sh           # write them
#   monitoring/render.sh --check   # exit 1 if a committed file differs (CI)
#
# Needs `jsonnet` (Debian/Ubuntu: apt-get install jsonnet; the Go
# implementation's `jsonnet` works too).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

command -v jsonnet >/dev/null || { echo "render: jsonnet is missing (apt-get install jsonnet)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# -m: one file per field of the output object; with -S the fields are file
# contents, without it JSON documents. (jsonnet 0.18 does not create
# directories: make them first.)
r='(import "render.jsonnet")'
jsonnet -J "$here" -S -e "std.lines(std.objectFields($r.yaml) + std.objectFields($r.json))" >"$tmp/.paths"
while IFS= read -r rel; do mkdir -p "$tmp/$(dirname "$rel")"; done <"$tmp/.paths"
jsonnet -J "$here" -S -m "$tmp" -e "$r.yaml" >"$tmp/.list"
jsonnet -J "$here" -m "$tmp" -e "$r.json" >>"$tmp/.list"

stale=0
while IFS= read -r new; do
  rel=${new#"$tmp"/}
  dst=$repo/$rel
  if cmp -s "$new" "$dst"; then
    continue
  fi
  if $check; then
    echo "render: $rel is out of date" >&2
    stale=1
  else
    mkdir -p "$(dirname "$dst")"
    cp "$new" "$dst"
    echo "render: wrote $rel"
  fi
done <"$tmp/.list"

if ((stale)); then
  echo "render: run monitoring/render.sh and commit the result" >&2
  exit 1
fi
