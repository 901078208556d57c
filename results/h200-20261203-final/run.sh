#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-20261203-final/run.sh OUTDIR
# Builds scalebench (CUDA, cuDNN), runs the whole GPU suite on the final tree, ResNet-152 and
# the large transformer presets beside PyTorch eager and torch.compile, and the PyTorch
# gradient checks of ResNet-50 on the cuDNN engine. torch.compile fills its on-disk cache
# while scalebench builds (the GPU otherwise idle); the timed runs are serial. Each step has
# a time limit so the whole command ends within the device call; the caller packs the
# folders resnet/, transformer/ and check/ (the device call returns at most 8 files).
set -uo pipefail
O=${1:?output folder}
B=${BUILD:-build-gpu}
mkdir -p "$O/resnet" "$O/transformer" "$O/check"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
(python3 tests/reference/bench_resnet_torch.py --model resnet152 --run compile:128 --steps 1 --warmup 1 --out /tmp/warm.jsonl
 python3 tests/reference/bench_bert_torch.py --run bert-large:compile:256 --run gpt2-medium:compile:8 --steps 1 --warmup 1 \
   --out /tmp/warm.jsonl) >"$O/torch_warm.txt" 2>&1 &
warm=$!
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
nice cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step \
    >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
el "wait for torch.compile's cache"
wait $warm
el "GPU suite"
timeout 150 "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
echo "suite exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests? ran" "$O/gpu_tests.log" | head -20
el "ResNet-152"
BUILD=$B RUNS="resnet152:128" ENGINES=cudnn STEPS=15 WARMUP=5 timeout 150 launch/bench_resnet.sh "$O/resnet" 2>&1 | tail -8
el "transformers"
RUNS="bert-large:256 gpt2-medium:8" STEPS=10 WARMUP=5 timeout 200 launch/bench_transformer.sh "$O/transformer" 2>&1 | tail -8
for p in bf16; do
  el "PyTorch check resnet50 $p (conv_engine auto: cudnn)"
  timeout 60 "$B/tests/scalebench_export_step" --config configs/resnet50.yaml --backend cuda --precision $p --batch 16 \
      --perturb 0.05 --dir "/tmp/export_$p" >"$O/check/export_resnet50_$p.txt" 2>&1 &&
    timeout 90 python3 tests/reference/torch_transformer_check.py "/tmp/export_$p" \
      --json "$O/check/torch_check_resnet50_$p.json" >"$O/check/torch_check_resnet50_$p.txt" 2>&1
  echo "   exit $?"; tail -1 "$O/check/torch_check_resnet50_$p.txt"
done
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
el "op profile resnet50 b256 (cudnn)"
timeout 60 mpirun "${root[@]}" -np 1 "$B/scalebench" train --config configs/resnet50.yaml --backend cuda --steps 5 --warmup 2 \
    --scaling 1 --profile-ops "$O/check/opprof_resnet50_b256.jsonl" --out "$O/check/train_resnet50_b256.jsonl" \
    >"$O/check/opprof_resnet50_b256.txt" 2>&1 || tail -5 "$O/check/opprof_resnet50_b256.txt"
el done
cat "$O/resnet/table.md" "$O/transformer/table.md" 2>/dev/null
