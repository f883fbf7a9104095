# Sourced by scripts/test.sh, scripts/fuzz.sh and scripts/run.sh (after `root` is set to the
# checkout): what their build trees share.
#
# The release tree's flags (release_tree_flags, for cmake): -O2 with line tables only (-g1),
# which name file and line in a backtrace or a profile as -g does, at a fifth less compile
# time and a quarter of the object size; and each test binary compiled as one unit
# (OKL_UNITY_TESTS: gcc compiles okl_core_test's 23 files in 78 s of CPU so, 230 s file by
# file; an edit to one test file recompiles its binary's unit). scripts/run.sh and
# scripts/test.sh build the same build/release with them.
release_tree_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
  -DOKL_UNITY_TESTS=ON)

# The compiler cache every build tree compiles through.
# ccache (Debian's, from scripts/install_deps.sh) keeps its cache outside every checkout, in
# OKL_CCACHE_DIR (default ~/.cache/okl-ccache), bounded at OKL_CCACHE_SIZE (default 3G; one
# run of scripts/test.sh stores about 0.4 GB, so the cache holds the trees of several commits).
# base_dir is the checkout and hash_dir is off, and CMake maps the checkout to "." in debug
# information (CMakeLists.txt), so a fresh clone in any other folder compiles to the same
# objects and hits the cache. pch_defines,time_macros let it cache precompiled headers. A
# hit is exact: ccache hashes the compiler, its flags and every included file's content.
# OKL_CCACHE=0 (or no ccache installed) builds without it.
#
# Sets ccache_launcher, the value for -DCMAKE_CXX_COMPILER_LAUNCHER (empty without the
# cache), and defines ccache_counts, which prints the cache's hits and misses so far.
ccache_launcher=""
ccache_counts() { echo "0 0"; }
if [[ ${OKL_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
  export CCACHE_DIR=${OKL_CCACHE_DIR:-$HOME/.cache/okl-ccache}
  mkdir -p "$CCACHE_DIR"
  ccache --set-config=max_size="${OKL_CCACHE_SIZE:-3G}"
  ccache --set-config=hash_dir=false
  ccache --set-config=sloppiness=pch_defines,time_macros
  ccache_counts() {
    ccache --print-stats | awk '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
                                $1 == "cache_miss" { m += $2 } END { print h + 0, m + 0 }'
  }
  # CMake runs each compile as `env CCACHE_DIR=... CCACHE_BASEDIR=<checkout> ccache c++ ...`,
  # so a later `cmake --build build/TREE` by hand uses the same cache and base_dir.
  ccache_launcher="/usr/bin/env;CCACHE_DIR=$CCACHE_DIR;CCACHE_BASEDIR=$root;ccache"
fi
