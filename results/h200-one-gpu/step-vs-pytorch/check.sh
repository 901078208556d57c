#!/usr/bin/env bash
# Correctness on one H200, run from the repository root (nothing timed):
#   results/h200-one-gpu/step-vs-pytorch/check.sh OUTDIR
# Builds the GPU tests and the step exporter (CUDA, cuDNN), runs the whole GPU suite, then the
# PyTorch gradient checks: bert-base and gpt2-small in bf16 and fp32, ResNet-50 in fp32.
set -uo pipefail
O=${1:?output folder}
B=build-gpu
mkdir -p "$O/check"
trap '(cd "$O" && [[ -d check ]] && tar czf check.tgz check && rm -rf check)' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { local l=$(( ${LIMIT:-545} - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
el build
(cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
   cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step) >"$O/build.log" 2>&1 ||
  { tail -30 "$O/build.log"; exit 1; }
el "GPU suite"
timeout "$(left 230)" "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
echo "   exit $?"; grep -E '^\[  (PASSED|FAILED) ' "$O/gpu_tests.log" | head -12
check() {  # preset precision batch [export flags]
  local p=$1 prec=$2 b=$3; shift 3
  el "PyTorch check $p $prec"
  timeout "$(left 40)" "$B/tests/scalebench_export_step" --config "configs/$p.yaml" --backend cuda --precision "$prec" \
      --batch "$b" "$@" --dir "/tmp/ref-$p-$prec" >"$O/check/export_${p}_$prec.log" 2>&1 &&
    timeout "$(left 90)" python3 tests/reference/torch_transformer_check.py "/tmp/ref-$p-$prec" \
      --json "$O/check/torch_check_${p}_$prec.json" >"$O/check/torch_check_${p}_$prec.txt" 2>&1
  echo "   exit $?"; tail -1 "$O/check/torch_check_${p}_$prec.txt"
}
for prec in bf16 fp32; do check bert-base "$prec" 8; check gpt2-small "$prec" 8; done
check resnet50 fp32 16 --perturb 0.05
el done
