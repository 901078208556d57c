#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/epilogues/run.sh OUTDIR
# Builds scalebench (CUDA, cuDNN) and runs, one after the other: the whole GPU suite; the
# up-front refusal of a batch that does not fit; the built-in workload as `mpirun -np 1
# scalebench` runs it; bert-base (batch 32, 256) and gpt2-small (batch 8) beside PyTorch eager
# and torch.compile (launch/bench_transformer.sh); ResNet-152 at batch 128 on the cuDNN engine
# beside PyTorch (launch/bench_resnet.sh); the op profiles of those steps and of ResNet-50 on
# cuDNN; the PyTorch gradient checks of bert-base and gpt2-small (bf16) and of ResNet-50 on
# the cuDNN engine (fp32, bf16, fp16). torch.compile fills its on-disk cache while scalebench
# builds and its suite runs; the timed runs are serial.
set -uo pipefail
O=${1:?output folder}
B=${BUILD:-build-gpu}
mkdir -p "$O/bench" "$O/bench_resnet" "$O/check"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
python3 tests/reference/bench_bert_torch.py --run bert-base:compile:256 --run gpt2-small:compile:8 --steps 1 \
    --warmup 1 --out /tmp/torch_warm.jsonl >"$O/check/torch_warm.txt" 2>&1 &
warm_transformer=$!
python3 tests/reference/bench_resnet_torch.py --model resnet152 --run compile:128 --steps 1 --warmup 1 \
    --out /tmp/torch_warm.jsonl >"$O/check/torch_warm_resnet.txt" 2>&1 &
warm_resnet=$!
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
nice cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step \
    >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
grep -E "cuDNN" "$O/build.log" | head -2
el "GPU suite"
timeout 240 "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
echo "suite exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests? ran|could not fuse" "$O/gpu_tests.log" | head -30
el "a batch that does not fit (expect exit 2, one line, no record)"
timeout 60 mpirun "${root[@]}" -np 1 "$B/scalebench" train --config configs/bert-large.yaml --backend cuda \
    --batch-size 60000 --steps 2 --out "$O/check/nofit.jsonl" >"$O/check/nofit.txt" 2>&1
echo "   exit $?"; head -5 "$O/check/nofit.txt"; [[ -e "$O/check/nofit.jsonl" ]] && echo "   a record was written"
el "built-in workload"
timeout 90 mpirun "${root[@]}" -np 1 "$B/scalebench" --out "$O/check/default.jsonl" >"$O/check/default.txt" 2>&1
echo "   exit $?"; tail -3 "$O/check/default.txt"
wait $warm_transformer
el "transformers beside PyTorch"
BUILD=$B RUNS="bert-base:32,256 gpt2-small:8" STEPS=15 WARMUP=5 timeout 200 launch/bench_transformer.sh "$O/bench" 2>&1 | tail -8
wait $warm_resnet
el "ResNet-152 b128 beside PyTorch"
BUILD=$B RUNS="resnet152:128" ENGINES=cudnn timeout 150 launch/bench_resnet.sh "$O/bench_resnet" 2>&1 | tail -6
for spec in bert-base:256 gpt2-small:8 resnet50:256 resnet152:128; do
  p=${spec%%:*} b=${spec#*:}
  el "op profile $p b$b"
  timeout 60 mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "configs/$p.yaml" --backend cuda --precision bf16 \
      --batch-size "$b" --steps 5 --warmup 2 --scaling 1 --profile-ops "$O/check/opprof_${p}_b$b.jsonl" \
      --out "$O/check/train_${p}_b$b.jsonl" >"$O/check/opprof_${p}_b$b.txt" 2>&1 || tail -5 "$O/check/opprof_${p}_b$b.txt"
done
check() {  # preset precision batch [export flags]
  local p=$1 prec=$2 b=$3; shift 3
  el "PyTorch check $p $prec"
  timeout 60 "$B/tests/scalebench_export_step" --config "configs/$p.yaml" --backend cuda --precision "$prec" \
      --batch "$b" "$@" --dir "/tmp/ref-$p-$prec" >"$O/check/export_${p}_$prec.log" 2>&1 &&
    timeout 120 python3 tests/reference/torch_transformer_check.py "/tmp/ref-$p-$prec" \
      --json "$O/check/torch_check_${p}_$prec.json" >"$O/check/torch_check_${p}_$prec.txt" 2>&1
  echo "   exit $?"; tail -2 "$O/check/torch_check_${p}_$prec.txt"
}
check bert-base bf16 8
check gpt2-small bf16 8
for prec in fp32 bf16 fp16; do check resnet50 "$prec" 16 --perturb 0.05; done
el done
cat "$O/bench/table.md" "$O/bench_resnet/table.md"
(cd "$O" && tar czf check.tgz check && rm -rf check && tar czf bench.tgz bench && rm -rf bench && tar czf bench_resnet.tgz bench_resnet && rm -rf bench_resnet)
