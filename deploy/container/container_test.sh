#!/usr/bin/env bash
# CI step "container image": validates deploy/ and builds and runs okl's container image, as
# root on a Debian 12 machine with no Docker daemon. Installs what it needs.
#   1. tests/container/deploy_config_test.py: the compose file (docker-compose config), the
#      Prometheus config (promtool), `kubectl kustomize deploy/k8s` and deploy/envoy/envoy.yaml.
#   2. deploy/container/build_image.sh: the image from the Dockerfile (buildah; the
#      debootstrapped base image is cached in podman's store, build steps with --layers).
#   3. tests/container/container_test.py: the server in containers of that image over gRPC:
#      bearer tokens from deploy/make_secrets.sh (UNAUTHENTICATED without one, rotation with
#      SIGHUP), /metrics, the HEALTHCHECK, SIGTERM, a restart on the same /data,
#      --allow_unauthenticated, TLS and mutual TLS.
# OKL_CONTAINER_TEST=static runs only step 1 (seconds); OKL_IMAGE names the image
# (default localhost/okl:latest); OKL_SKIP_BUILD=1 tests an already built image.
set -euo pipefail
cd "$(dirname "$0")/../.."

image=${OKL_IMAGE:-localhost/okl:latest}
export OKL_IMAGE=$image
start=$SECONDS

bash deploy/container/install_container_deps.sh

# Debian's python3 (python3-grpcio, python3-protobuf, python3-yaml): a `python3` earlier on
# PATH may be another interpreter.
py=/usr/bin/python3

echo "-- deploy/ configuration (compose, Prometheus, kustomize, Envoy)"
"$py" tests/container/deploy_config_test.py --deploy_dir=deploy

if [[ ${OKL_CONTAINER_TEST:-all} == static ]]; then
  exit 0
fi

if [[ ${OKL_SKIP_BUILD:-0} != 1 ]]; then
  echo "-- image build"
  bash deploy/container/build_image.sh
fi

echo "-- the server in containers of $image"
"$py" tests/container/container_test.py --image="$image" --proto_dir=proto \
  --protoc="$(command -v protoc)" --grpc_python_plugin="$(command -v grpc_python_plugin)" \
  --make_secrets=deploy/make_secrets.sh &
test_pid=$!
# The test removes its containers (okl-container-test-PID-*) itself, also on SIGTERM; this
# catches those that a SIGKILL of it would leave behind.
cleanup() {
  kill "$test_pid" 2>/dev/null && wait "$test_pid" 2>/dev/null
  podman ps -a --format '{{.Names}}' 2>/dev/null | grep "^okl-container-test-$test_pid-" \
    | xargs -r podman rm -f -v -t 0 >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 143' TERM INT
wait "$test_pid"

echo "-- container image: passed in $((SECONDS - start)) s"
