#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/fused/run.sh OUTDIR
# Builds scalebench (CUDA, cuDNN), runs the whole GPU suite, the transformer presets beside
# PyTorch eager and torch.compile (launch/bench_transformer.sh), their op profiles, and the
# PyTorch gradient checks of bert-base and gpt2-small. torch.compile's compilation fills its
# on-disk cache while scalebench builds (the GPU otherwise idle); the timed runs are serial.
# RUNS (launch/bench_transformer.sh's preset:batches list) and CHECKS (presets to check
# against PyTorch) choose what runs.
set -uo pipefail
O=${1:?output folder}
B=${BUILD:-build-gpu}
runs=${RUNS:-"bert-base:32,256 gpt2-small:8"}
checks=${CHECKS:-"bert-base gpt2-small"}
mkdir -p "$O/bench" "$O/check"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
warm_runs=()
for spec in $runs; do
  IFS=, read -r -a batches <<<"${spec#*:}"; warm_runs+=(--run "${spec%%:*}:compile:${batches[-1]}")
done
python3 tests/reference/bench_bert_torch.py "${warm_runs[@]}" --steps 1 --warmup 1 --out /tmp/torch_warm.jsonl \
  >"$O/torch_warm.txt" 2>&1 &
warm=$!
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
nice cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step \
    >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
wait $warm
el "GPU suite"
timeout 240 "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
echo "suite exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests? ran" "$O/gpu_tests.log" | head -20
el bench
RUNS="$runs" STEPS=${STEPS:-15} WARMUP=5 launch/bench_transformer.sh "$O/bench" 2>&1 | tail -12
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
for spec in $runs; do
  p=${spec%%:*}; IFS=, read -r -a batches <<<"${spec#*:}"; b=${batches[-1]}
  el "op profile $p b$b"
  timeout 60 mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "configs/$p.yaml" --backend cuda --precision bf16 \
      --batch-size "$b" --steps 5 --warmup 2 --scaling 1 --profile-ops "$O/check/opprof_${p}_b$b.jsonl" \
      --out "$O/check/train_${p}_b$b.jsonl" >"$O/check/opprof_${p}_b$b.txt" 2>&1 || tail -5 "$O/check/opprof_${p}_b$b.txt"
done
for p in $checks; do
  el "PyTorch check $p bf16"
  timeout 60 "$B/tests/scalebench_export_step" --config "configs/$p.yaml" --backend cuda --precision bf16 --batch 8 \
      --dir "/tmp/ref-$p" >"$O/check/export_$p.log" 2>&1 &&
    timeout 120 python3 tests/reference/torch_transformer_check.py "/tmp/ref-$p" \
      --json "$O/check/torch_check_${p}_bf16.json" >"$O/check/torch_check_${p}_bf16.txt" 2>&1
  echo "   exit $?"; tail -2 "$O/check/torch_check_${p}_bf16.txt"
done
el done
cat "$O/bench/table.md"
(cd "$O" && tar czf check.tgz check && rm -rf check && tar czf bench.tgz bench && rm -rf bench)
