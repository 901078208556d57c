#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/dropout-quad/run.sh OUTDIR
# Builds scalebench and its GPU tests (CUDA, cuDNN), runs the attention and dropout GPU tests,
# then op profiles of gpt2-medium b8 and bert-base b256 (bf16): each as its preset, and with
# attention dropout 0 (the mask's cost is the difference of the attention rows).
set -uo pipefail
O=${1:?output folder}
B=build-gpu
mkdir -p "$O/prof"
trap '(cd "$O" && tar czf prof.tgz prof && rm -rf prof)' EXIT
export NCCL_NVLS_ENABLE=0
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
el "GPU tests: attention, dropout, transformer steps, graphs"
timeout 120 "$B/tests/scalebench_gpu_tests" --gtest_filter='*Attention*:*Dropout*:*ResidualLayerNorm*:CudaTransformerStep*:CudaGraphs*' \
    >"$O/gpu_tests.log" 2>&1
echo "   exit $?"; grep -E '^\[  (PASSED|FAILED) ' "$O/gpu_tests.log" | head -12
for spec in gpt2-medium:8 bert-base:256; do
  p=${spec%%:*} b=${spec#*:}
  sed 's/^\( *attention_dropout:\).*/\1 0.0/' "configs/$p.yaml" >"$O/prof/${p}_noattndrop.yaml"
  grep -q 'attention_dropout: 0.0' "$O/prof/${p}_noattndrop.yaml" || echo "   no attention_dropout key in configs/$p.yaml"
  for cfg in "configs/$p.yaml" "$O/prof/${p}_noattndrop.yaml"; do
    tag=$p; [[ $cfg == *noattndrop* ]] && tag=${p}_noattndrop
    el "op profile $tag b$b"
    timeout 60 mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "$cfg" --backend cuda --precision bf16 \
        --batch-size "$b" --steps 5 --warmup 2 --scaling 1 --profile-ops "$O/prof/opprof_${tag}_b$b.jsonl" \
        --out "$O/prof/train_${tag}_b$b.jsonl" >"$O/prof/opprof_${tag}_b$b.txt" 2>&1 || tail -5 "$O/prof/opprof_${tag}_b$b.txt"
    sed -n 2,4p "$O/prof/opprof_${tag}_b$b.txt" | tail -1; grep -E '^attention_' "$O/prof/opprof_${tag}_b$b.txt"
  done
done
el done
