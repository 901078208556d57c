#!/usr/bin/env bash
# The commands behind this folder's files (README.md gives the tree of each), run from the
# repository root on one H200:
#   results/h200-kernel-history/resnet/run.sh OUT
# The convolution tests and the whole GPU suite; ResNet-50 (bf16, batch 256) beside PyTorch eager
# and torch.compile; op profiles of ResNet-50 and of ResNet-101 at batch 128 (opprof/); BERT-base
# beside PyTorch with its op profile (bert/); ResNet-50 in fp16 and the 40-step loss curves
# (final/); the PyTorch gradient checks of ResNet-50 (fp32, bf16, fp16; CPU fp32) and of BERT-base.
set -uo pipefail
O=${1:?output folder}
B=${BUILD:-build-gpu}
here=$(dirname "$0")
mkdir -p "$O/opprof" "$O/bert" "$O/final"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
train() { mpirun "${root[@]}" -np 1 "$B/scalebench" train "$@"; }
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/bert/build.log" 2>&1
cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step >>"$O/bert/build.log" 2>&1 ||
  { tail -30 "$O/bert/build.log"; exit 1; }
nvidia-smi >"$O/bert/nvidia-smi.txt" 2>&1
"$B/tests/scalebench_gpu_tests" --gtest_filter='*Conv*' >"$O/gpu_conv_tests.log" 2>&1
"$B/tests/scalebench_gpu_tests" >"$O/final/gpu_tests.log" 2>&1
echo "GPU suite exit $?"
train --config configs/resnet50.yaml --out "$O/resnet50_b256.jsonl"
python3 tests/reference/bench_resnet_torch.py --run eager:256 --run compile:256 --out "$O/torch_resnet50.jsonl"
train --config configs/resnet50.yaml --steps 10 --warmup 3 --profile-ops "$O/opprof/ops.jsonl" \
    --out "$O/opprof/train.jsonl" >"$O/opprof/resnet50_b256.txt" 2>&1
cp "$here/opprof/resnet101_b128.yaml" "$O/opprof/"
train --config "$O/opprof/resnet101_b128.yaml" --steps 10 --warmup 3 --profile-ops "$O/opprof/ops.jsonl" \
    --out "$O/opprof/train.jsonl" >"$O/opprof/resnet101_b128.txt" 2>&1
train --config configs/bert-base.yaml --batch-size 256 --steps 10 --warmup 3 --profile-ops "$O/bert/opprof_ops.jsonl" \
    --out "$O/bert/opprof_train.jsonl" >"$O/bert/bert-base_b256_opprof.txt" 2>&1
RUNS="bert-base:32,256" launch/bench_transformer.sh "$O/bert"
train --config configs/resnet50.yaml --precision fp16 --steps 10 --warmup 3 --out "$O/final/resnet50_fp16_b256.jsonl"
for precision in fp16 bf16; do
  train --config configs/resnet50.yaml --precision "$precision" --steps 40 --warmup 0 \
      --out "$O/final/resnet50_${precision}_40steps.jsonl"
done
check() {  # NAME CONFIG BACKEND PRECISION BATCH [export_step flags]
  local name=$1 config=$2 backend=$3 precision=$4 batch=$5; shift 5
  "$B/tests/scalebench_export_step" --config "$config" --backend "$backend" --precision "$precision" --batch "$batch" \
      "$@" --dir "/tmp/ref-$name" >"$O/export_$name.log" 2>&1 &&
    python3 tests/reference/torch_transformer_check.py "/tmp/ref-$name" --json "$O/torch_check_$name.json" \
      >"$O/torch_check_$name.txt" 2>&1
  echo "PyTorch check $name: exit $?"
}
for precision in fp32 bf16 fp16; do
  check "resnet50_$precision" configs/resnet50.yaml cuda "$precision" 16 --perturb 0.05
done
check resnet50_cpu_fp32 configs/resnet50.yaml cpu fp32 16 --perturb 0.05
for precision in fp32 bf16; do check "bert-base_$precision" configs/bert-base.yaml cuda "$precision" 8; done
train --config configs/resnet50.yaml --out "$O/resnet50_b256_final.jsonl"
