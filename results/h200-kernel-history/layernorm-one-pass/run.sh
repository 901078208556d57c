#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/layernorm-one-pass/run.sh OUTDIR
# Builds scalebench, its GPU tests and the step exporter (CUDA, cuDNN) while gemm_probe.py times
# the weight-gradient GEMMs in torch's cuBLAS; then the whole GPU suite, the op profiles of
# bert-base b256, gpt2-medium b8 and ResNet-50 b256 (cuDNN engine), and the PyTorch checks:
# ResNet-50 fp32/bf16/fp16, bert-base bf16/fp32, gpt2-small bf16.
set -uo pipefail
O=${1:?output folder}
B=build-gpu
mkdir -p "$O/check"
trap '(cd "$O" && [[ -d check ]] && tar czf check.tgz check && rm -rf check)' EXIT
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# Seconds left of the call's 420, capped at $1: no stage runs past it, so the trap still packs the folder.
left() { local l=$(( 420 - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
python3 results/h200-kernel-history/layernorm-one-pass/gemm_probe.py >"$O/gemm_probe.txt" 2>&1 &
probe=$!
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
nice cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step \
    >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
wait $probe; cat "$O/gemm_probe.txt"
el "GPU suite"
timeout "$(left 150)" "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
echo "   exit $?"; grep -E '^\[  (PASSED|FAILED) ' "$O/gpu_tests.log" | head -12
opprof() {  # tag config batch
  el "op profile $1"
  timeout "$(left 45)" mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "$2" --backend cuda --precision bf16 \
      --batch-size "$3" --steps 5 --warmup 2 --scaling 1 --profile-ops "$O/check/opprof_$1.jsonl" \
      --out "$O/check/train_$1.jsonl" >"$O/check/opprof_$1.txt" 2>&1 || tail -5 "$O/check/opprof_$1.txt"
  sed -n 4p "$O/check/opprof_$1.txt"; grep -E '^(maxpool|residual_layernorm_backward|layernorm_backward)' "$O/check/opprof_$1.txt"
}
opprof bert-base_b256 configs/bert-base.yaml 256
opprof gpt2-medium_b8 configs/gpt2-medium.yaml 8
opprof resnet50_cudnn_b256 configs/resnet50.yaml 256
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
check bert-base bf16 8
check gpt2-small bf16 8
check bert-base fp32 8
el done
