#!/usr/bin/env bash
# Remakes this folder on one GPU (the committed records: one H200, see README.md): the GPU suite,
# `gemm` beside torch.mm, the shape sweep, mlp-large's training curve and `comm` on one GPU, as
# launch/gpu_benchmarks.sh runs them. From the repository root:
#   results/h200-one-gpu/gemm/run.sh [OUT]        (default runs/h200-one-gpu/gemm)
# Copy OUT's files over this folder's to replace the records, then run results/tables.py.
set -euo pipefail
cd "$(dirname "$0")/../../.."
exec launch/gpu_benchmarks.sh "${1:-runs/h200-one-gpu/gemm}" all
