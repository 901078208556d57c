#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/large-presets/run.sh OUTDIR
# Builds scalebench (CUDA, cuDNN) and its GPU tests while torch.compile fills its on-disk cache
# for bert-large and gpt2-medium; meanwhile (correctness only, nothing timed) the whole GPU
# suite and the PyTorch gradient checks of bert-base and gpt2-small in fp32. When the caches are
# warm, one after the other: the stem probe (stem_probe.py), bert-large (batch 32, 256) and
# gpt2-medium (batch 8) beside PyTorch eager and torch.compile (launch/bench_transformer.sh),
# then the op profiles of both steps.
set -uo pipefail
O=${1:?output folder}
B=build-gpu
here=$(dirname "$0")
mkdir -p "$O/bench" "$O/check"
trap '(cd "$O" && for d in check bench; do [[ -d $d ]] && tar czf $d.tgz $d && rm -rf $d; done)' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# Seconds left of the call's 570, capped at $1: no stage runs past it, so the trap still packs the folders.
left() { local l=$(( 570 - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
warm=()
for run in bert-large:compile:256 gpt2-medium:compile:8; do
  python3 tests/reference/bench_bert_torch.py --run "$run" --steps 1 --warmup 1 --out /tmp/torch_warm.jsonl \
      >"$O/check/torch_warm_${run%%:*}.txt" 2>&1 &
  warm+=($!)
done
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
nice cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step \
    >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
el "GPU suite"
timeout "$(left 150)" "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
echo "   exit $?"; grep -E '^\[  (PASSED|FAILED) ' "$O/gpu_tests.log" | head -12
for p in bert-base gpt2-small; do
  el "PyTorch check $p fp32"
  timeout 60 "$B/tests/scalebench_export_step" --config "configs/$p.yaml" --backend cuda --precision fp32 \
      --batch 8 --dir "/tmp/ref-$p-fp32" >"$O/check/export_${p}_fp32.log" 2>&1 &&
    timeout 120 python3 tests/reference/torch_transformer_check.py "/tmp/ref-$p-fp32" \
      --json "$O/check/torch_check_${p}_fp32.json" >"$O/check/torch_check_${p}_fp32.txt" 2>&1
  echo "   exit $?"; tail -2 "$O/check/torch_check_${p}_fp32.txt"
done
el "waiting for torch.compile's caches"
wait "${warm[@]}"
el "stem probe"
timeout "$(left 60)" python3 "$here/stem_probe.py" 2>&1 | tee "$O/stem_probe.txt"
el "transformers beside PyTorch"
RUNS="bert-large:32,256 gpt2-medium:8" STEPS=15 WARMUP=5 timeout "$(left 260)" launch/bench_transformer.sh "$O/bench" 2>&1 | tail -9
cp "$O/bench/table.md" "$O/table.md" 2>/dev/null
for spec in bert-large:256 gpt2-medium:8; do
  p=${spec%%:*} b=${spec#*:}
  el "op profile $p b$b"
  timeout "$(left 45)" mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "configs/$p.yaml" --backend cuda --precision bf16 \
      --batch-size "$b" --steps 5 --warmup 2 --scaling 1 --profile-ops "$O/check/opprof_${p}_b$b.jsonl" \
      --out "$O/check/train_${p}_b$b.jsonl" >"$O/check/opprof_${p}_b$b.txt" 2>&1 || tail -5 "$O/check/opprof_${p}_b$b.txt"
done
el done
