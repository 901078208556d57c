#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/pool-backward/run.sh OUTDIR
# Builds scalebench and its GPU tests (CUDA, cuDNN), runs the convolution-layer GPU tests (im2col,
# col2im, pools, BatchNorm, both engines, graph replay), ResNet-50 b256's op profile on each
# convolution engine (the max pool and the stem's im2col), and, while time is left, bert-large's
# step alone at batch 256 and 32.
set -uo pipefail
O=${1:?output folder}
B=build-gpu
mkdir -p "$O/check"
trap '(cd "$O" && [[ -d check ]] && tar czf check.tgz check && rm -rf check)' EXIT
export NCCL_NVLS_ENABLE=0
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { local l=$(( ${BUDGET:-230} - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
el "GPU tests: convolution layers"
timeout "$(left 60)" "$B/tests/scalebench_gpu_tests" \
    --gtest_filter='ConvOps*:ConvEngine*:FusedBatchNorm*:CudaGraphs*:CudaOpProfile*:CudaTrainingStep*' >"$O/gpu_tests.log" 2>&1
echo "   exit $?"; grep -E '^\[  (PASSED|FAILED) ' "$O/gpu_tests.log" | head -12
run() {  # tag config batch [--profile-ops]
  el "$1"
  local prof=(); [[ ${4:-} == prof ]] && prof=(--profile-ops "$O/check/opprof_$1.jsonl")
  timeout "$(left 40)" mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "$2" --backend cuda --precision bf16 \
      --batch-size "$3" --steps 10 --warmup 3 --scaling 1 "${prof[@]}" --out "$O/check/train_$1.jsonl" \
      >"$O/check/$1.txt" 2>&1 || tail -5 "$O/check/$1.txt"
  sed -n 4p "$O/check/$1.txt"; grep -E '^(maxpool|im2col [0-9]+x147)' "$O/check/$1.txt"
}
cp configs/resnet50.yaml "$O/check/resnet50_im2col.yaml"; echo "conv_engine: im2col" >>"$O/check/resnet50_im2col.yaml"
run opprof_resnet50_cudnn_b256 configs/resnet50.yaml 256 prof
run opprof_resnet50_im2col_b256 "$O/check/resnet50_im2col.yaml" 256 prof
run bert-large_b256 configs/bert-large.yaml 256
run bert-large_b32 configs/bert-large.yaml 32
el done
