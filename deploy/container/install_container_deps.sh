#!/usr/bin/env bash
# Installs the Debian 12 packages that build and run okl's container image without a Docker
# daemon (debootstrap, podman, buildah, runc) and the tools that validate deploy/
# (docker-compose for `docker-compose config`, kubernetes-client for `kubectl kustomize`,
# promtool from prometheus, python3-yaml). Idempotent: apt-get runs only when something is
# missing.
set -euo pipefail

packages=(
  # the image: a Debian 12 base debootstrapped from the machine's apt mirror, imported with
  # podman, built with buildah (chroot isolation), run with podman + runc
  debootstrap podman buildah runc fuse-overlayfs containernetworking-plugins
  # the container test's gRPC client (stubs generated at test time) and the metrics scrape
  python3 python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc python3-yaml
  # validating deploy/: compose file, kustomize rendering, the Prometheus config
  docker-compose prometheus
)
# kubectl: Debian's kubernetes-client, unless a kubectl is already installed (some machines
# carry one from another package, which kubernetes-client would conflict with).
command -v kubectl >/dev/null || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install_container_deps: installing ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
