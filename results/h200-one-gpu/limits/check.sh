#!/usr/bin/env bash
# Correctness on one H200 under one GPU's limits, from the repository root (nothing timed):
#   results/h200-one-gpu/limits/check.sh OUTDIR [native|sm_80|sm_86|sm_89|sm_90]
# Builds the GPU tests and the step exporter for sm_90, then with SCALEBENCH_DEVICE_LIMITS set
# to the architecture (none for native) runs the whole GPU suite and the PyTorch gradient
# checks: bert-base and gpt2-small in bf16 (batch 8), ResNet-50 in fp32 (batch 16, weights
# perturbed 0.05). One call per limits (native, sm_89, sm_80), each within 9 minutes; the build
# is kept between calls on a warm machine. Writes OUTDIR/check_<limits>.log (the summary) and
# OUTDIR/check_<limits>.tgz (gpu_tests.log, the exports and the PyTorch checks' reports).
set -uo pipefail
O=${1:?output folder}
L=${2:-native}
B=build-gpu
D="$O/check_$L"
mkdir -p "$D"
exec > >(tee "$O/check_$L.log") 2>&1
trap '(cd "$O" && tar czf "check_$L.tgz" "check_$L" && rm -rf "check_$L")' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { local l=$(( ${LIMIT:-545} - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
nvidia-smi >"$D/nvidia-smi.txt" 2>&1
el "build (sm_90)"
# Configured once: the three limits may run side by side on one build, and configuring
# concurrently breaks CMake's compiler probes.
({ [[ -f $B/CMakeCache.txt ]] || cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90; } &&
   cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step) >"$D/build.log" 2>&1 ||
  { tail -30 "$D/build.log"; exit 1; }
if [[ $L == native ]]; then unset SCALEBENCH_DEVICE_LIMITS; else export SCALEBENCH_DEVICE_LIMITS=$L; fi
el "GPU suite under $L limits"
timeout "$(left 300)" "$B/tests/scalebench_gpu_tests" >"$D/gpu_tests.log" 2>&1
echo "   exit $?"; grep -E '^\[  (PASSED|FAILED) ' "$D/gpu_tests.log" | head -12
check() {  # preset precision batch [export flags]
  local p=$1 prec=$2 b=$3; shift 3
  el "PyTorch check $p $prec under $L limits"
  timeout "$(left 40)" "$B/tests/scalebench_export_step" --config "configs/$p.yaml" --backend cuda --precision "$prec" \
      --batch "$b" "$@" --dir "/tmp/ref-$L-$p-$prec" >"$D/export_${p}_$prec.log" 2>&1 &&
    timeout "$(left 90)" python3 tests/reference/torch_transformer_check.py "/tmp/ref-$L-$p-$prec" \
      --json "$D/torch_check_${p}_$prec.json" >"$D/torch_check_${p}_$prec.txt" 2>&1
  echo "   exit $?"; tail -1 "$D/torch_check_${p}_$prec.txt"
}
check bert-base bf16 8
check gpt2-small bf16 8
check resnet50 fp32 16 --perturb 0.05
el done
