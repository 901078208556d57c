#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/maxpool-rows/run.sh OUTDIR TREE
# Builds scalebench and its GPU tests (CUDA, cuDNN) in TREE (a tree of the repository), runs the GPU
# tests of the max pool, BatchNorm, the activations, the GEMM and the elementwise ops, then the op
# profiles of ResNet-50 b256 (cuDNN engine) and bert-base b256.
set -uo pipefail
O=${1:?output folder}
T=${2:?tree}
B=build-gpu
mkdir -p "$O/check"
trap '(cd "$O" && [[ -d check ]] && tar czf check.tgz check && rm -rf check)' EXIT
export NCCL_NVLS_ENABLE=0
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { local l=$(( 170 - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
cd "$T"
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests >>"$O/build.log" 2>&1 ||
    { tail -30 "$O/build.log"; exit 1; }
el "GPU tests"
timeout "$(left 60)" "$B/tests/scalebench_gpu_tests" \
    --gtest_filter='ConvOpsMaxPool.*:FusedBatchNorm*:*ActivationTest*:*GemmTest*:CudaOpsTest.*:CudaTrainingStep*' \
    >"$O/gpu_tests.log" 2>&1
echo "   exit $?"; grep -E '^\[  (PASSED|FAILED) ' "$O/gpu_tests.log" | head -12
opprof() {  # tag config batch
  el "op profile $1"
  timeout "$(left 40)" mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "$2" --backend cuda --precision bf16 \
      --batch-size "$3" --steps 5 --warmup 2 --scaling 1 --profile-ops "$O/check/opprof_$1.jsonl" \
      --out "$O/check/train_$1.jsonl" >"$O/check/opprof_$1.txt" 2>&1 || tail -5 "$O/check/opprof_$1.txt"
  sed -n 4p "$O/check/opprof_$1.txt"; grep -E '^(maxpool|activation|add |cast )' "$O/check/opprof_$1.txt"
}
opprof resnet50_cudnn_b256 configs/resnet50.yaml 256
opprof bert-base_b256 configs/bert-base.yaml 256
el done
