#!/usr/bin/env bash
# Installs what is missing, builds okl and runs every test, in six steps:
#   1. clang with -Wthread-safety -Werror=thread-safety-analysis (a compile-time check of
#      the product's code: the server, the okl tool and every library they link),
#   2. gcc with ThreadSanitizer, running the concurrency tests of the model registry, the
#      ModelHost, the quotas, the work pool and the event book (gRPC and Abseil come from Debian
#      uninstrumented, so TSan runs where okl owns every lock),
#   3. gcc with AddressSanitizer + UndefinedBehaviorSanitizer, running every test,
#   4. the libFuzzer targets (clang, tests/fuzz), each for 30 s on its seed corpus,
#   5. the container image (deploy/container/container_test.sh),
#   6. the normal optimised build, running every test; a table of each step's wall time
#      closes the run.
# Build trees live in build/ (reused between runs, so a second run is incremental).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# Each step's wall time, printed when the run ends (however it ends), so that a CI log
# shows where its minutes went: CI has 90 of them, and okl keeps to 60.
phase_names=()
phase_starts=()
phase() {
  echo "== $*"
  phase_names+=("$*")
  phase_starts+=("$SECONDS")
}
print_phases() {
  local i end
  echo "== wall time by step (of ${SECONDS} s)"
  for i in "${!phase_names[@]}"; do
    end=${phase_starts[i + 1]:-$SECONDS}
    printf '%6d s  %s\n' "$((end - phase_starts[i]))" "${phase_names[i]}"
  done
}
trap print_phases EXIT

phase "dependencies (scripts/install_deps.sh)"
bash scripts/install_deps.sh

jobs=${OKL_JOBS:-$(nproc)}
# The sanitizer builds compile at -O1 with line tables only (-g1), as the sanitizers'
# documentation advises: a finding still names file and line, and gcc compiles
# tests/server/durability_test.cc under ASan+UBSan in 95 s instead of 210 s at -O2 -g.
sanitizer_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
configure() {  # configure DIR [cmake args...]
  local dir=$1; shift
  cmake -S "$root" -B "$dir" -G Ninja -Wno-dev "$@" >/dev/null
}

phase "clang thread-safety build of the product (the server and the okl tool: every library)"
configure build/tsa -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DOKL_THREAD_SAFETY=ON -DOKL_BUILD_BENCHMARKS=OFF
cmake --build build/tsa -j "$jobs" --target okl_server okl

phase "thread sanitizer build: concurrency tests of the model registry, the host, the quotas, the work pool and the event book"
configure build/tsan "${sanitizer_flags[@]}" -DOKL_SANITIZE=thread \
  -DOKL_BUILD_BENCHMARKS=OFF
cmake --build build/tsan -j "$jobs" --target okl_core_test okl_model_host_test \
  okl_quotas_test okl_work_pool_test okl_event_book_test
build/tsan/tests/core/okl_core_test --gtest_filter='ModelRegistry*:ValidateName*:RegretScheduler*'
build/tsan/tests/server/okl_model_host_test
build/tsan/tests/server/okl_quotas_test
build/tsan/tests/server/okl_work_pool_test
# The event book's group commit, in memory (RocksDB is uninstrumented).
build/tsan/tests/server/okl_event_book_test --gtest_filter='*Concurrent*/Memory:*Later*/Memory'

phase "address + undefined-behaviour sanitizer build and every test"
# Each GoogleTest binary runs as 4 shards, each one process for its share of the tests
# (tests/CMakeLists.txt, okl_gtest): under ASan a process's start-up costs more than most
# tests, and one process per test spent most of this step starting processes.
configure build/asan "${sanitizer_flags[@]}" -DOKL_SANITIZE=address,undefined \
  -DOKL_BUILD_BENCHMARKS=OFF -DOKL_TEST_SHARDS=4
cmake --build build/asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$root/tests/lsan_suppressions.txt:print_suppressions=0 \
  ctest --test-dir build/asan -j "$jobs" --output-on-failure \
  --timeout 900

phase "libFuzzer targets, 30 s each (tests/fuzz)"
bash scripts/fuzz.sh 30

# ==== container image (deploy/container/) ==============================================
# Validates deploy/ (compose, kustomize, Envoy), builds the image from the Dockerfile with
# buildah (no Docker daemon; the debootstrapped Debian 12 base is cached in podman's store)
# and drives okl_server in containers of it over gRPC: see deploy/README.md.
phase "container image"
bash deploy/container/container_test.sh
# ==== end container image ================================================================

phase "optimised build and every test"
configure build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build/release -j "$jobs"
ctest --test-dir build/release -j "$jobs" --output-on-failure --timeout 900
