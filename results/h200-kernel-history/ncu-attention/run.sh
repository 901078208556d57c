#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/ncu-attention/run.sh OUTDIR
# Nsight Compute on the fused attention kernels of one eager training step (CUDA graphs off)
# of gpt2-medium b8 and bert-base b256 (bf16): speed of light, warp states, scheduler,
# occupancy and instruction mix of the forward, dQ and dK/dV kernels of the first layer; and
# the forward kernel's SASS (the instruction counts of its loop).
set -uo pipefail
O=${1:?output folder}
B=build-gpu
export NCCL_NVLS_ENABLE=0
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
cmake --build "$B" -j"$(nproc)" --target scalebench >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
obj=$(find "$B" -name attention_kernels.cu.o | head -1)
cuobjdump --dump-sass "$obj" >"$O/attention.sass" 2>&1; gzip -9 "$O/attention.sass"
for spec in gpt2-medium:8 bert-base:256; do
  p=${spec%%:*} b=${spec#*:}
  el "ncu $p b$b"
  timeout 150 ncu --clock-control none --kernel-name regex:'attention_(forward|backward_dq|backward_dkdv)_kernel' \
      --launch-count 3 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats \
      "$B/scalebench" train --config "configs/$p.yaml" --backend cuda --precision bf16 --batch-size "$b" \
      --steps 1 --warmup 0 --scaling 1 --cuda-graphs false --out "/tmp/ncu_$p.jsonl" >"$O/ncu_$p.txt" 2>&1
  echo "   exit $?"; grep -E "attention_|Duration|Issue Slots Busy|No Eligible|Achieved Occupancy|Registers Per|Theoretical Occ|Compute \(SM\) Thr|Memory Thr" "$O/ncu_$p.txt" | head -40
done
el done
