#!/usr/bin/env bash
# Installs what is missing, builds okl and runs every test, in five steps:
#   1. clang with ThreadSanitizer, running the concurrency tests of the model registry, the
#      ModelHost, the quotas, the work pool and the event book (gRPC and Abseil come from Debian
#      uninstrumented, so TSan runs where okl owns every lock),
#   2. clang with AddressSanitizer + UndefinedBehaviorSanitizer and with -Wthread-safety
#      -Werror=thread-safety-analysis (the compile-time check of every lock, over the
#      product and its tests), running every test,
#   3. the libFuzzer targets (clang, tests/fuzz), each for 30 s on its seed corpus,
#   4. the container image (deploy/container/container_test.sh),
#   5. the normal optimised build, running every test; a table of each step's wall time
#      and compiler-cache hits closes the run.
# Build trees live in build/ (reused between runs, so a second run is incremental). Every
# tree compiles through ccache, in a cache outside the checkout that any other checkout on
# the machine shares (scripts/build_env.sh; README.md, "The compiler cache").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# The compiler cache (scripts/build_env.sh) is set up once ccache is installed; until then
# the step table counts no compiles.
ccache_launcher=""
ccache_counts() { echo "0 0"; }

# Each step's wall time and the compiles it took from the cache, printed when the run ends
# (however it ends), so that a CI log shows where its minutes went: CI has 90 of them, and
# okl aims at 45.
phase_names=()
phase_starts=()
phase_counts=()
phase() {
  echo "== $*"
  phase_names+=("$*")
  phase_starts+=("$SECONDS")
  phase_counts+=("$(ccache_counts)")
}
print_phases() {
  local i end h0 m0 h1 m1 cached
  local now; now=$(ccache_counts)
  echo "== wall time by step (of ${SECONDS} s), and the compiles the cache served"
  for i in "${!phase_names[@]}"; do
    end=${phase_starts[i + 1]:-$SECONDS}
    read -r h0 m0 <<<"${phase_counts[i]}"
    read -r h1 m1 <<<"${phase_counts[i + 1]:-$now}"
    cached=""
    if ((h1 - h0 + m1 - m0 > 0)); then
      cached=$(awk -v h=$((h1 - h0)) -v m=$((m1 - m0)) \
        'BEGIN { printf "%5d of %5d compiles cached (%3.0f%%)", h, h + m, 100 * h / (h + m) }')
    fi
    printf '%6d s  %-39s  %s\n' "$((end - phase_starts[i]))" "$cached" "${phase_names[i]}"
  done
  if [[ -n $ccache_launcher ]]; then
    read -r h0 m0 <<<"${phase_counts[0]}"
    read -r h1 m1 <<<"$now"
    echo "== ccache: $((h1 - h0)) hits, $((m1 - m0)) misses this run; the cache holds" \
      "$(ccache --print-stats | awk '$1 == "cache_size_kibibyte" { printf "%.2f GB", $2 * 1024 / 1e9 }')" \
      "of at most $(ccache --get-config=max_size) (CCACHE_DIR=$CCACHE_DIR ccache -s shows it, ccache -C empties it)"
  fi
}
trap print_phases EXIT

phase "dependencies (scripts/install_deps.sh)"
bash scripts/install_deps.sh
source scripts/build_env.sh
phase_counts[0]=$(ccache_counts)  # the cache's counts before this run's first compile

jobs=${OKL_JOBS:-$(nproc)}
# The sanitizer builds compile at -O1 with line tables only (-g1), as the sanitizers'
# documentation advises: a finding still names file and line, and gcc compiles
# tests/server/durability_test.cc under ASan+UBSan in 95 s instead of 210 s at -O2 -g.
sanitizer_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
configure() {  # configure DIR [cmake args...]
  local dir=$1; shift
  # A tree built by another compiler (an older run's) is configured afresh: CMake cannot
  # switch the compiler of an existing cache.
  local compiler=c++ arg cached
  for arg in "$@"; do [[ $arg == -DCMAKE_CXX_COMPILER=* ]] && compiler=${arg#*=}; done
  if [[ -f $dir/CMakeCache.txt ]]; then
    cached=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$dir/CMakeCache.txt")
    [[ ${cached##*/} == "$compiler" ]] || rm -rf "$dir"
  fi
  cmake -S "$root" -B "$dir" -G Ninja -Wno-dev "-DCMAKE_CXX_COMPILER_LAUNCHER=$ccache_launcher" \
    "$@" >/dev/null
}

phase "thread sanitizer build: concurrency tests of the model registry, the host, the quotas, the work pool and the event book"
# clang: this tree builds in 151 s instead of gcc's 246 s, and its tests run in 23 s
# instead of 67 s (docs/benchmarks.md, "Build times").
configure build/tsan -DCMAKE_CXX_COMPILER=clang++ "${sanitizer_flags[@]}" -DOKL_SANITIZE=thread \
  -DOKL_BUILD_BENCHMARKS=OFF
cmake --build build/tsan -j "$jobs" --target okl_core_concurrency_test okl_model_host_test \
  okl_quotas_test okl_work_pool_test okl_event_book_test
build/tsan/tests/core/okl_core_concurrency_test
build/tsan/tests/server/okl_model_host_test
build/tsan/tests/server/okl_quotas_test
build/tsan/tests/server/okl_work_pool_test
# The event book's group commit, in memory (RocksDB is uninstrumented).
build/tsan/tests/server/okl_event_book_test --gtest_filter='*Concurrent*/Memory:*Later*/Memory'

phase "address + undefined-behaviour sanitizer and thread-safety build, and every test"
# The thread-safety analysis is clang's, at compile time, and independent of the code's
# optimisation and sanitizers: this tree checks it over the product and every test, so
# no tree of its own compiles the product a second time for it (product code has no
# NDEBUG-only paths that this tree's -DNDEBUG would hide from it).
# Each GoogleTest binary runs as 4 shards, each one process for its share of the tests
# (tests/CMakeLists.txt, okl_gtest): under ASan a process's start-up costs more than most
# tests, and one process per test spent most of this step starting processes.
# OKL_UNITY_TESTS: a test binary's files compile as one unit, sharing their gRPC and GoogleTest code.
# clang: the same sanitizers as gcc's (and its UBSan checks enum values too), and it compiles
# this tree in half gcc's CPU time (docs/benchmarks.md, "Build times"); gcc keeps the
# release tree.
configure build/asan -DCMAKE_CXX_COMPILER=clang++ "${sanitizer_flags[@]}" -DOKL_SANITIZE=address,undefined \
  -DOKL_THREAD_SAFETY=ON -DOKL_BUILD_BENCHMARKS=OFF -DOKL_TEST_SHARDS=4 -DOKL_UNITY_TESTS=ON
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
configure build/release "${release_tree_flags[@]}"
cmake --build build/release -j "$jobs"
ctest --test-dir build/release -j "$jobs" --output-on-failure --timeout 900
