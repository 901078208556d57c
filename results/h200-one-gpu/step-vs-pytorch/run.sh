#!/usr/bin/env bash
# The timed runs of this folder, on one H200, from the repository root:
#   results/h200-one-gpu/step-vs-pytorch/run.sh OUTDIR
# Builds scalebench (CUDA, cuDNN) while torch.compile fills its on-disk cache for the compiled
# transformer runs; the op profiles (device time of each op alone) of bert-base b256 and
# gpt2-medium b8; when the caches are warm, nothing else running: the transformer presets beside
# PyTorch eager and torch.compile (launch/bench_transformer.sh), then ResNet-50 beside PyTorch
# (launch/bench_resnet.sh) while time is left. LIMIT: seconds the call may run (default 545).
set -uo pipefail
O=${1:?output folder}
B=build-gpu
mkdir -p "$O/bench" "$O/check"
trap '(cd "$O" && for d in check bench bench_resnet; do [[ -d $d ]] && tar czf $d.tgz $d && rm -rf $d; done)' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { local l=$(( ${LIMIT:-545} - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
warm=()
for run in gpt2-medium:compile:8 bert-large:compile:256 bert-base:compile:256 gpt2-small:compile:8; do
  python3 tests/reference/bench_bert_torch.py --run "$run" --steps 1 --warmup 1 --out /tmp/torch_warm.jsonl \
      >"$O/check/torch_warm_${run%%:*}.txt" 2>&1 &
  warm+=($!)
done
el build
(cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
   nice cmake --build "$B" -j"$(nproc)" --target scalebench) >"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
opprof() {  # tag config batch
  el "op profile $1"
  timeout "$(left 45)" mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "$2" --backend cuda --precision bf16 \
      --batch-size "$3" --steps 5 --warmup 2 --scaling 1 --profile-ops "$O/check/opprof_$1.jsonl" \
      --out "$O/check/train_$1.jsonl" >"$O/check/opprof_$1.txt" 2>&1 || tail -5 "$O/check/opprof_$1.txt"
  sed -n 4p "$O/check/opprof_$1.txt"; grep -E '^(embedding_backward|labelled_bias_grad|bias_grad|sum of)' "$O/check/opprof_$1.txt"
}
opprof bert-base_b256 configs/bert-base.yaml 256
opprof gpt2-medium_b8 configs/gpt2-medium.yaml 8
el "waiting for torch.compile's caches"
wait "${warm[@]}"
el "transformers beside PyTorch"
RUNS="bert-base:32,256 bert-large:32,256 gpt2-small:8 gpt2-medium:8" STEPS=15 WARMUP=5 timeout "$(left 300)" \
    launch/bench_transformer.sh "$O/bench" 2>&1 | tail -12
cp "$O/bench/table.md" "$O/table.md" 2>/dev/null
if (( $(left 200) > 120 )); then
  el "ResNet-50 beside PyTorch"
  mkdir -p "$O/bench_resnet"
  BUILD=$B RUNS="resnet50:256" STEPS=20 WARMUP=5 timeout "$(left 200)" launch/bench_resnet.sh "$O/bench_resnet" 2>&1 | tail -6
  cat "$O/bench_resnet/table.md" >>"$O/table.md" 2>/dev/null
fi
el done
