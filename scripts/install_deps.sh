#!/usr/bin/env bash
# Installs the Debian 12 packages okl builds, tests and runs with. Idempotent: it only
# calls apt-get when something is missing, so it is cheap to run before every build.
set -euo pipefail

packages=(
  # toolchain
  g++ clang libclang-rt-14-dev cmake ninja-build pkg-config
  ccache mold  # the compiler cache and linker of every build tree (scripts/build_env.sh)
  # core
  libabsl-dev libeigen3-dev
  # wire contract, service, storage, metrics
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  librocksdb-dev prometheus-cpp-dev
  libssl-dev  # bearer tokens: SHA-256 and constant-time compares (server/auth/tokens.h)
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  openssl  # the TLS tests and bench/security_cost.sh make their certificates with it
  libdlib-dev  # bench/krls_peer_bench.cc: dlib's krls, the peer of okl's KRLS tracker
  # the Python client tests (stubs generated at test time with protoc + grpc_python_plugin)
  # and the okl Python package (client/python): pip-installed and tested with pytest;
  # scipy (sparse inputs) and sklearn (Pipelines, cross_val_score) are its optional ones
  python3 python3-grpcio python3-protobuf python3-yaml python3-numpy python3-pytest
  python3-pip python3-setuptools python3-wheel python3-scipy python3-sklearn
  # the metrics tests: promtool checks the exposition, a real Prometheus scrapes the server
  prometheus
  nginx  # deploy/cluster/local_cluster.sh's router (the cluster system test)
  gnuplot-nox  # `okl observe|replay --plot` renders learning curves with gnuplot
  # replication on etcd (server/etcd/): a real single-member etcd 3.4 for the tests, and the
  # .proto files the client's stubs are generated from at build time, under
  # /usr/share/gocode/src: etcd's own (rpc.proto, v3election.proto, kv.proto, auth.proto),
  # gogoproto/gogo.proto, and google/api/{annotations,http}.proto (grpc-gateway's copy;
  # golang-etcd-server-dev depends on it, and on most of Debian's Go sources: ~140 packages)
  etcd-server etcd-client
  golang-etcd-server-dev golang-github-gogo-protobuf-dev golang-github-grpc-ecosystem-grpc-gateway-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
