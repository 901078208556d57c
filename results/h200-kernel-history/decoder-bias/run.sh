#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/decoder-bias/run.sh OUTDIR
# Builds scalebench (CUDA, cuDNN) while torch.compile fills its on-disk cache for bert-base,
# gpt2-small and ResNet-152; runs the GPU tests of the Linear epilogues and the transformer ops
# and the PyTorch gradient check of bert-base (bf16); waits for every compilation to end, then,
# with nothing else on the machine, one after the other: bert-base (batch 32, 256) and gpt2-small
# (batch 8) beside PyTorch eager and torch.compile (launch/bench_transformer.sh), ResNet-152 at
# batch 128 on cuDNN beside PyTorch (launch/bench_resnet.sh).
set -uo pipefail
O=${1:?output folder}
B=${BUILD:-build-gpu}
mkdir -p "$O/bench" "$O/bench_resnet" "$O/check"
trap '(cd "$O" && for d in check bench bench_resnet; do tar czf $d.tgz $d && rm -rf $d; done)' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
python3 tests/reference/bench_bert_torch.py --run bert-base:compile:256 --run gpt2-small:compile:8 --steps 1 \
    --warmup 1 --out /tmp/torch_warm.jsonl >"$O/check/torch_warm.txt" 2>&1 &
w1=$!
python3 tests/reference/bench_resnet_torch.py --model resnet152 --run compile:128 --steps 1 --warmup 1 \
    --out /tmp/torch_warm.jsonl >"$O/check/torch_warm_resnet.txt" 2>&1 &
w2=$!
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
nice cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step \
    >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
el "GPU tests: Linear epilogues, transformer ops"
timeout 90 "$B/tests/scalebench_gpu_tests" --gtest_filter='CudaOpsTest.LinearEpilogues*:TransformerOpsTest*' \
    >"$O/gpu_tests.log" 2>&1
echo "   exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests? ran|could not fuse" "$O/gpu_tests.log" | grep -v "bias cuBLASLt" | head
el "PyTorch check bert-base bf16"
timeout 60 "$B/tests/scalebench_export_step" --config configs/bert-base.yaml --backend cuda --precision bf16 --batch 8 \
    --dir /tmp/ref-bert >"$O/check/export_bert-base_bf16.log" 2>&1 &&
  timeout 90 python3 tests/reference/torch_transformer_check.py /tmp/ref-bert \
    --json "$O/check/torch_check_bert-base_bf16.json" >"$O/check/torch_check_bert-base_bf16.txt" 2>&1
echo "   exit $?"; tail -1 "$O/check/torch_check_bert-base_bf16.txt"
wait $w1 $w2
el "transformers beside PyTorch (nothing else running)"
BUILD=$B RUNS="bert-base:32,256 gpt2-small:8" STEPS=15 WARMUP=5 timeout 170 launch/bench_transformer.sh "$O/bench" 2>&1 | tail -6
el "ResNet-152 b128 beside PyTorch"
BUILD=$B RUNS="resnet152:128" ENGINES=cudnn timeout 110 launch/bench_resnet.sh "$O/bench_resnet" 2>&1 | tail -4
el done
