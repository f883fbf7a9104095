#!/usr/bin/env bash
# Builds okl's libFuzzer targets (tests/fuzz) with clang + AddressSanitizer and
# UndefinedBehaviorSanitizer in build/fuzz, then runs each for SECONDS (default 60), two
# at a time (a libFuzzer process uses one core; CI has two), on a copy of its seed corpus
# and regressions in a temporary directory (the repository is never written to). Exits
# non-zero if any target finds a crash, a leak, a timeout or an out-of-memory, and prints
# where the reproducer is: it is kept in build/fuzz/crashes/<target>/. See
# tests/fuzz/README.md.
#
#   scripts/fuzz.sh        # 60 s per target: ~2 minutes plus the build
#   scripts/fuzz.sh 600    # longer
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${1:-60}
if ! [[ $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS]" >&2
  exit 2
fi
jobs=${OKL_JOBS:-$(nproc)}
source scripts/build_env.sh
build=build/fuzz
targets=(snapshot config_text request)

echo "== fuzz build (clang, libFuzzer, address + undefined sanitizers)"
cmake -S "$root" -B "$build" -G Ninja -Wno-dev -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_CXX_COMPILER_LAUNCHER=$ccache_launcher" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOKL_FUZZ=ON -DOKL_SANITIZE=address,undefined \
  -DOKL_BUILD_BENCHMARKS=OFF -DOKL_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target okl_fuzz

work=$(mktemp -d "${TMPDIR:-/tmp}/okl-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
crashes=$root/$build/crashes
parallel=2

# fuzz_target TARGET: fuzzes okl_fuzz_TARGET for $seconds; what it prints goes to
# $work/TARGET.report and its exit status to $work/TARGET.status, so that two targets
# running at once do not interleave their reports.
fuzz_target() {
  local target=$1
  local corpus=$work/$target/corpus
  local artifacts=$crashes/$target
  local log=$work/$target.log
  local status=0
  rm -rf "$artifacts"  # what an earlier run found is in its log, not this one
  mkdir -p "$corpus" "$artifacts"
  cp tests/fuzz/corpus/"$target"/* "$corpus"/
  if [[ -d tests/fuzz/regressions/$target ]]; then
    find tests/fuzz/regressions/"$target" -maxdepth 1 -type f ! -name README.md \
      -exec cp {} "$corpus"/ \;
  fi
  "$build/tests/fuzz/okl_fuzz_$target" "$corpus" -max_total_time="$seconds" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" >"$log" 2>&1 || status=$?
  {
    echo "== okl_fuzz_$target: ${seconds}s"
    # The last status line: coverage, corpus size and exec/s.
    grep -aE '^#[0-9]+' "$log" | tail -n 1 || true
    if ((status != 0)); then
      tail -n 60 "$log" | cat -v
      cp "$log" "$artifacts/"
      echo "okl_fuzz_$target FAILED (exit $status); reproducer(s):"
      grep -aoE "Test unit written to .*" "$log" | sed 's/^Test unit written to /  /' || true
      echo "  rerun: $build/tests/fuzz/okl_fuzz_$target <file>; log: $artifacts/$target.log"
    fi
  } >"$work/$target.report" 2>&1
  echo "$status" >"$work/$target.status"
}

echo "== fuzzing ${targets[*]}: ${seconds}s each, $parallel at a time"
running=0
for target in "${targets[@]}"; do
  if ((running >= parallel)); then
    wait -n || true  # a target's outcome is its .status file, not its job's exit status
    running=$((running - 1))
  fi
  fuzz_target "$target" &
  running=$((running + 1))
done
wait

failed=()
for target in "${targets[@]}"; do
  cat "$work/$target.report" 2>/dev/null || echo "okl_fuzz_$target: not run (its set-up failed)"
  if [[ $(cat "$work/$target.status" 2>/dev/null) != 0 ]]; then
    failed+=("$target")
  fi
done

if ((${#failed[@]} > 0)); then
  echo "fuzzing found problems in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzzing: no crash in ${#targets[@]} targets x ${seconds}s"
