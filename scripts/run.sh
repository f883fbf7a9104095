#!/usr/bin/env bash
# Installs what is missing, builds okl, and starts okl_server on a loopback port
# (127.0.0.1:50051 unless OKL_LISTEN says otherwise; beyond loopback okl_server needs
# --auth_tokens_file). Extra arguments go to okl_server,
# e.g. `scripts/run.sh --max_models=100`. Stop it with Ctrl-C (SIGINT) or SIGTERM: it
# drains in-flight calls and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

root=$PWD

bash scripts/install_deps.sh
source scripts/build_env.sh  # the release tree's flags and the compiler cache, as scripts/test.sh's
cmake -S . -B build/release -G Ninja -Wno-dev "${release_tree_flags[@]}" \
  "-DCMAKE_CXX_COMPILER_LAUNCHER=$ccache_launcher" >/dev/null
cmake --build build/release -j "${OKL_JOBS:-$(nproc)}" --target okl_server okl

exec build/release/server/okl_server --listen="${OKL_LISTEN:-127.0.0.1:50051}" "$@"
