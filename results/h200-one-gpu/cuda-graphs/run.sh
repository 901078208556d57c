#!/usr/bin/env bash
# Remakes this folder on one GPU (the committed records: one H200, see README.md), from the
# repository root:
#   results/h200-one-gpu/cuda-graphs/run.sh OUT
# The GPU suite; the per-op speed test (the disabled GPU test TransformerOpsSpeed); the PyTorch
# gradient checks of bert-base and gpt2-small in fp32 and bf16 (results/h200-reliability/nccl-stall-opprof/run.sh's
# checks part); `train` of the default MLP and
# mlp-large with CUDA graphs on, then off (graphs.jsonl); `comm` beside nccl-tests for every
# collective, three runs of all_reduce and one of the others (results/h200-reliability/comm-stress/run.sh's
# comm part: give NCCL_TESTS);
# then launch/bench_transformer.sh into OUT/transformer.
# Copy OUT's files over this folder's to replace the records, then run results/tables.py.
set -uo pipefail
O=${1:?output folder}
B=${BUILD:-build-gpu}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step >>"$O/build.log" 2>&1 ||
  { tail -30 "$O/build.log"; exit 1; }
mpirun "${root[@]}" -np 1 "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
echo "GPU suite exit $?"
mpirun "${root[@]}" -np 1 "$B/tests/scalebench_gpu_tests" --gtest_also_run_disabled_tests \
    --gtest_filter='*TransformerOpsSpeed*' >"$O/transformer_ops_speed.log" 2>&1
BUILD="$B" results/h200-reliability/nccl-stall-opprof/run.sh "$O" checks
for graphs in true false; do
  mpirun "${root[@]}" -np 1 "$B/scalebench" train --cuda-graphs "$graphs" --scaling 1 --out "$O/graphs.jsonl" \
      >>"$O/graphs.txt" 2>&1
  echo "train (default), CUDA graphs $graphs: exit $?"
  mpirun "${root[@]}" -np 1 "$B/scalebench" train -c configs/mlp-large.yaml --cuda-graphs "$graphs" --scaling 1 \
      --out "$O/graphs.jsonl" >>"$O/graphs.txt" 2>&1
  echo "train (mlp-large), CUDA graphs $graphs: exit $?"
done
BUILD="$B" OPS=all_reduce RUNS=3 results/h200-reliability/comm-stress/run.sh "$O" comm
BUILD="$B" OPS="all_gather reduce_scatter broadcast reduce" RUNS=1 results/h200-reliability/comm-stress/run.sh "$O" comm
RUNS="bert-base:32,256 bert-large:32 gpt2-small:8" STEPS=20 WARMUP=5 launch/bench_transformer.sh "$O/transformer"
