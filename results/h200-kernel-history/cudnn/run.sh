#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/cudnn/run.sh OUTDIR
# builds scalebench with CUDA and cuDNN, runs the GPU tests of the convolutional layers,
# launch/bench_resnet.sh (both engines beside PyTorch eager and torch.compile), the op profiles
# of the cuDNN engine, and the PyTorch gradient checks of ResNet-50. torch.compile's compilation
# fills its on-disk cache while scalebench builds (the GPU idle then); the timed runs are serial.
set -uo pipefail
O=${1:?output folder}
B=${BUILD:-/tmp/sb-build}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
(for spec in resnet50:256 resnet152:128; do
   python3 tests/reference/bench_resnet_torch.py --model "${spec%%:*}" --run "compile:${spec#*:}" --steps 1 \
       --warmup 1 --out /tmp/torch_warm.jsonl
 done) >"$O/torch_warm.txt" 2>&1 &
warm=$!
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
nice cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step \
    >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
grep -E "cuDNN" "$O/build.log"
wait $warm
echo "== GPU tests of the convolutional layers"
"$B/tests/scalebench_gpu_tests" --gtest_filter='ConvOps*:ConvEngine*:FusedBatchNorm*' >"$O/gpu_conv_tests.log" 2>&1
grep -E "^\[  (PASSED|FAILED) |tests? ran" "$O/gpu_conv_tests.log"
BUILD=$B launch/bench_resnet.sh "$O"
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
for spec in resnet50:256 resnet152:128; do
  m=${spec%%:*}
  echo "== op profile, $m cudnn"
  mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "$O/scalebench_${m}_cudnn_b${spec#*:}.yaml" --steps 5 \
      --warmup 2 --profile-ops "$O/opprof_${m}_cudnn.jsonl" --out "$O/opprof_train_${m}_cudnn.jsonl" \
      >"$O/opprof_${m}_cudnn.txt" 2>&1 || tail -5 "$O/opprof_${m}_cudnn.txt"
done
for p in fp32 bf16; do
  echo "== PyTorch check, resnet50 $p (conv_engine auto: cudnn)"
  "$B/tests/scalebench_export_step" --config configs/resnet50.yaml --backend cuda --precision $p --batch 16 \
      --perturb 0.05 --dir "/tmp/export_$p" >"$O/export_resnet50_$p.txt" 2>&1 &&
    python3 tests/reference/torch_transformer_check.py "/tmp/export_$p" --json "$O/torch_check_resnet50_$p.json" \
      >"$O/torch_check_resnet50_$p.txt" 2>&1
  echo "   exit $?"; tail -2 "$O/torch_check_resnet50_$p.txt"
done
