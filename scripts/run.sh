#!/usr/bin/env bash
# Installs what is missing, builds okl, and runs its main job. Until the gRPC server
# lands, that job is the offline replay: the NORMA core learns the Mackey-Glass series
# (../shared/data/mg30.dat, time embedding 7) online and writes its prequential
# predictions to build/mg30.predictions.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh
cmake -S . -B build/release -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release -j "${OKL_JOBS:-$(nproc)}" --target okl

data=${OKL_DATA_DIR:-../shared/data}
build/release/client/okl replay \
  --config client/examples/mg30.textproto \
  --input "$data/mg30.dat" --format series --embedding 7 \
  --output build/mg30.predictions
echo "predictions: build/mg30.predictions"
