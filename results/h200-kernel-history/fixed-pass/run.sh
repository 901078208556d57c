#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/fixed-pass/run.sh OUTDIR
# Builds scalebench and its GPU tests (CUDA, cuDNN) while torch.compile fills its on-disk cache
# for bert-base, gpt2-small and gpt2-medium; meanwhile (correctness, nothing timed) the whole
# GPU suite, then the op profiles (device time of each op alone, so the compiles on the CPU do
# not enter them) of ResNet-50 b256 on each convolution engine (the max pool, the stem's
# im2col), gpt2-medium b8 and bert-base b256. When the caches are warm: the transformer presets
# beside PyTorch eager and torch.compile (launch/bench_transformer.sh), nothing else running;
# then, while time is left, the bf16 PyTorch checks.
set -uo pipefail
O=${1:?output folder}
B=build-gpu
mkdir -p "$O/bench" "$O/check"
trap '(cd "$O" && for d in check bench; do [[ -d $d ]] && tar czf $d.tgz $d && rm -rf $d; done)' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# Seconds left of the call's 560, capped at $1: no stage runs past it, so the trap still packs the folders.
left() { local l=$(( 560 - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
warm=()
for run in gpt2-medium:compile:8 bert-base:compile:256 gpt2-small:compile:8; do
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
opprof() {  # tag config batch
  el "op profile $1"
  timeout "$(left 45)" mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "$2" --backend cuda --precision bf16 \
      --batch-size "$3" --steps 5 --warmup 2 --scaling 1 --profile-ops "$O/check/opprof_$1.jsonl" \
      --out "$O/check/train_$1.jsonl" >"$O/check/opprof_$1.txt" 2>&1 || tail -5 "$O/check/opprof_$1.txt"
  grep -E '^(maxpool|im2col|attention_)' "$O/check/opprof_$1.txt" | head -8
}
cp configs/resnet50.yaml "$O/check/resnet50_im2col.yaml"; echo "conv_engine: im2col" >>"$O/check/resnet50_im2col.yaml"
opprof resnet50_cudnn_b256 configs/resnet50.yaml 256
opprof resnet50_im2col_b256 "$O/check/resnet50_im2col.yaml" 256
opprof gpt2-medium_b8 configs/gpt2-medium.yaml 8
opprof bert-base_b256 configs/bert-base.yaml 256
el "waiting for torch.compile's caches"
wait "${warm[@]}"
el "transformers beside PyTorch"
RUNS="bert-base:32,256 gpt2-small:8 gpt2-medium:8" STEPS=15 WARMUP=5 timeout "$(left 240)" \
    launch/bench_transformer.sh "$O/bench" 2>&1 | tail -10
cp "$O/bench/table.md" "$O/table.md" 2>/dev/null
for p in bert-base gpt2-small; do
  el "PyTorch check $p bf16"
  timeout "$(left 40)" "$B/tests/scalebench_export_step" --config "configs/$p.yaml" --backend cuda --precision bf16 \
      --batch 8 --dir "/tmp/ref-$p-bf16" >"$O/check/export_${p}_bf16.log" 2>&1 &&
    timeout "$(left 90)" python3 tests/reference/torch_transformer_check.py "/tmp/ref-$p-bf16" \
      --json "$O/check/torch_check_${p}_bf16.json" >"$O/check/torch_check_${p}_bf16.txt" 2>&1
  echo "   exit $?"; tail -1 "$O/check/torch_check_${p}_bf16.txt"
done
el done
