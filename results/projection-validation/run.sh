#!/usr/bin/env bash
# The H200 figures behind the projection's step of N ranks, measured again from this tree, on one H200:
#   results/projection-validation/run.sh OUTDIR
# - the step-time spread of one rank (node.step_jitter_pct: sigma from p10-p90 over the median):
#   long one-rank `train` runs of four presets (200 measured steps each, step_ms p10/p90 in each record);
# - the launch of one all-reduce call (node.bucket_launch_us: the fit alpha of a one-rank `comm` sweep),
#   three sweeps of 8 B to 256 MiB.
# Writes OUTDIR/train_*.jsonl, OUTDIR/comm.jsonl, the logs and nvidia-smi.txt; about 4 minutes.
# The records go under results/h200-<date>-spread/ (a folder whose name starts with h200-, so
# Straggler.TheDefaultSpreadAndLaunchAreTheH200RecordsOwn reads them with the others).
set -uo pipefail
O=${1:?output folder}
B=build-gpu
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
el build
(cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
   cmake --build "$B" -j"$(nproc)" --target scalebench) >"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
for run in mlp-large:1024 bert-base:256 resnet50:256 gpt2-small:8; do
  name=${run%%:*} batch=${run##*:}
  el "train $name b$batch"
  timeout 60 mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "configs/$name.yaml" --backend cuda \
      --batch-size "$batch" --steps 200 --warmup 20 --scaling 1 --out "$O/train_$name.jsonl" \
      >"$O/train_$name.txt" 2>&1 || tail -5 "$O/train_$name.txt"
done
for i in 1 2 3; do
  el "comm one rank, sweep $i"
  timeout 60 mpirun "${root[@]}" -np 1 "$B/scalebench" comm --op all_reduce -b 8 -e 256M -f 2 \
      --out "$O/comm.jsonl" >"$O/comm_$i.txt" 2>&1 || tail -5 "$O/comm_$i.txt"
done
el done
