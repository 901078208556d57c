#!/usr/bin/env bash
# Configures and builds scalebench in build/ (Release; CUDA when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
