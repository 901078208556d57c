#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/gemm-algorithms/run.sh OUTDIR BASE
# Builds scalebench, its GPU tests and the step exporter (CUDA, cuDNN) from this tree and
# scalebench from BASE (the tree before its changes) while torch.compile fills its on-disk cache
# for bert-base. Then, one at a time: the whole GPU suite; the op profiles of bert-base b256
# (device time of each op alone) on this tree and on BASE; bert-base b256 beside PyTorch eager
# and torch.compile (launch/bench_transformer.sh); the PyTorch gradient checks (ResNet-50
# fp32/bf16/fp16, bert-base and gpt2-small fp32/bf16).
set -uo pipefail
O=${1:?output folder}
BASE=${2:?base tree}
B=build-gpu
mkdir -p "$O/bench" "$O/check"
trap '(cd "$O" && for d in check bench; do [[ -d $d ]] && tar czf $d.tgz $d && rm -rf $d; done)' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# Seconds left of the call's 545, capped at $1: no stage runs past it, so the trap still packs the folders.
left() { local l=$(( 545 - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
python3 tests/reference/bench_bert_torch.py --run bert-base:compile:256 --steps 1 --warmup 1 --out /tmp/torch_warm.jsonl \
    >"$O/check/torch_warm_bert-base.txt" 2>&1 &
warm=$!
build() {  # tree log targets...
  local tree=$1 log=$2; shift 2
  (cd "$tree" && cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
     nice cmake --build "$B" -j"$(nproc)" --target "$@") >"$log" 2>&1
}
el build
build "$BASE" "$O/check/base_build.log" scalebench & base_build=$!
build . "$O/build.log" scalebench scalebench_gpu_tests scalebench_export_step || { tail -30 "$O/build.log"; exit 1; }
el "GPU suite"
timeout "$(left 170)" "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
echo "   exit $?"; grep -E '^\[  (PASSED|FAILED) ' "$O/gpu_tests.log" | head -12
wait $base_build || tail -5 "$O/check/base_build.log"
opprof() {  # tree tag config batch
  el "op profile $2"
  timeout "$(left 45)" mpirun "${root[@]}" -np 1 "$1/$B/scalebench" train --config "configs/$3.yaml" --backend cuda \
      --precision bf16 --batch-size "$4" --steps 5 --warmup 2 --scaling 1 --profile-ops "$O/check/opprof_$2.jsonl" \
      --out "$O/check/train_$2.jsonl" >"$O/check/opprof_$2.txt" 2>&1 || tail -5 "$O/check/opprof_$2.txt"
  sed -n 4p "$O/check/opprof_$2.txt"; grep -E '^(gemm|labelled_bias_grad|bias_grad|sum of)' "$O/check/opprof_$2.txt"
}
opprof . bert-base_b256 bert-base 256
opprof "$BASE" base_bert-base_b256 bert-base 256
el "waiting for torch.compile's cache"
wait $warm
el "bert-base b256 beside PyTorch"
RUNS="bert-base:256" STEPS=15 WARMUP=5 timeout "$(left 120)" launch/bench_transformer.sh "$O/bench" 2>&1 | tail -6
cp "$O/bench/table.md" "$O/table.md" 2>/dev/null
check() {  # preset precision batch [export flags]
  local p=$1 prec=$2 b=$3; shift 3
  el "PyTorch check $p $prec"
  timeout "$(left 40)" "$B/tests/scalebench_export_step" --config "configs/$p.yaml" --backend cuda --precision "$prec" \
      --batch "$b" "$@" --dir "/tmp/ref-$p-$prec" >"$O/check/export_${p}_$prec.log" 2>&1 &&
    timeout "$(left 90)" python3 tests/reference/torch_transformer_check.py "/tmp/ref-$p-$prec" \
      --json "$O/check/torch_check_${p}_$prec.json" >"$O/check/torch_check_${p}_$prec.txt" 2>&1
  echo "   exit $?"; tail -1 "$O/check/torch_check_${p}_$prec.txt"
}
for prec in fp32 bf16 fp16; do check resnet50 "$prec" 16 --perturb 0.05; done
for prec in bf16 fp32; do check bert-base "$prec" 8; check gpt2-small "$prec" 8; done
el done
