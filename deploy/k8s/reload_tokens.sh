#!/usr/bin/env bash
# Rotates okl's bearer tokens on Kubernetes without restarting a pod:
#   1. replaces the Secret okl-tokens (key `tokens`) with TOKENS_FILE (kubectl apply);
#   2. for each pod of the StatefulSet okl: waits until the kubelet has put the new file at
#      /etc/okl/tokens (it refreshes mounted Secrets within its sync period plus cache TTL,
#      about a minute by default), then sends okl_server (PID 1) SIGHUP and checks its log:
#      "SIGHUP: re-read --auth_tokens_file". A file that does not parse leaves the pod on its
#      previous tokens, and this script fails naming the pod.
#
#   deploy/k8s/reload_tokens.sh deploy/secrets/okl/tokens [--namespace=okl] [--timeout=300]
#
# Add a token: deploy/make_secrets.sh token NAME --role=... ; revoke one: deploy/make_secrets.sh
# revoke NAME; then run this. Needs kubectl with exec and logs rights in the namespace.
set -euo pipefail

namespace=okl
timeout=300
file=""
for arg in "$@"; do
  case $arg in
    --namespace=*) namespace=${arg#*=} ;;
    --timeout=*) timeout=${arg#*=} ;;
    -*) echo "reload_tokens: unknown option $arg" >&2; exit 2 ;;
    *) file=$arg ;;
  esac
done
[[ -n $file && -f $file ]] || { echo "usage: $0 TOKENS_FILE [--namespace=okl] [--timeout=300]" >&2; exit 2; }
die() { echo "reload_tokens: $*" >&2; exit 1; }
k() { kubectl --namespace="$namespace" "$@"; }

want=$(sha256sum <"$file" | cut -d' ' -f1)
k create secret generic okl-tokens --from-file=tokens="$file" --dry-run=client -o yaml \
  | k apply -f - >/dev/null
echo "reload_tokens: Secret okl-tokens updated (sha256 ${want:0:16}...)"

pods=$(k get pods -l app.kubernetes.io/name=okl,app.kubernetes.io/component=server \
         -o jsonpath='{.items[*].metadata.name}')
[[ -n $pods ]] || die "no okl pods in namespace $namespace"
failed=()
for pod in $pods; do
  deadline=$((SECONDS + timeout))
  until [[ $(k exec "$pod" -c okl -- sha256sum /etc/okl/tokens 2>/dev/null | cut -d' ' -f1) == "$want" ]]; do
    ((SECONDS < deadline)) || { failed+=("$pod (the new file did not arrive in ${timeout}s)"); continue 2; }
    sleep 5
  done
  since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  k exec "$pod" -c okl -- sh -c 'kill -HUP 1'
  sleep 1
  log=$(k logs "$pod" -c okl --since-time="$since" 2>/dev/null | grep 'SIGHUP' || true)
  if grep -q 're-read --auth_tokens_file' <<<"$log"; then
    echo "reload_tokens: $pod: reloaded"
  else
    failed+=("$pod (${log:-no SIGHUP line in its log})")
  fi
done
((${#failed[@]} == 0)) || die "not reloaded: ${failed[*]}"
