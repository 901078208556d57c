#!/usr/bin/env bash
# Speed of what other GPUs run, on one H200, from the repository root:
#   results/h200-one-gpu/limits/speed.sh OUTDIR
# Builds scalebench for sm_90, then bert-base b32 and b256 and gpt2-small b8 (bf16, 15 steps after
# 5) natively and under sm_89 and sm_80 limits (SCALEBENCH_DEVICE_LIMITS: the launchers take
# that GPU's variants, and its shared memory per SM as the carveout), each one `train` command
# with `--profile-ops` (the op profile under that target's limits, which the projection of that
# target calibrates from). Writes OUTDIR/speed.log, OUTDIR/speed_table.md (samples/s under each
# limits against native, the attention backward's share of the step from the op profiles) and
# OUTDIR/speed.tgz (the train and op_profile records, each command's output).
set -uo pipefail
O=${1:?output folder}
B=build-gpu
D="$O/speed"
mkdir -p "$D"
exec > >(tee "$O/speed.log") 2>&1
trap '(cd "$O" && tar czf speed.tgz speed && rm -rf speed)' EXIT
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { local l=$(( ${LIMIT:-545} - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$D/nvidia-smi.txt" 2>&1
el "build (sm_90)"
(cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
   cmake --build "$B" -j"$(nproc)" --target scalebench) >"$D/build.log" 2>&1 || { tail -30 "$D/build.log"; exit 1; }
for run in bert-base:32 bert-base:256 gpt2-small:8; do
  model=${run%%:*} batch=${run##*:}
  for L in native sm_89 sm_80; do
    el "$model b$batch under $L limits"
    env -u SCALEBENCH_DEVICE_LIMITS $([[ $L == native ]] || echo SCALEBENCH_DEVICE_LIMITS=$L) \
      timeout "$(left 60)" mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "configs/$model.yaml" \
        --backend cuda --precision bf16 --batch-size "$batch" --steps 15 --warmup 5 --scaling 1 \
        --out "$D/train_${model}_b${batch}_$L.jsonl" --profile-ops "$D/opprof_${model}_b${batch}_$L.jsonl" \
        >"$D/train_${model}_b${batch}_$L.txt" 2>&1 || tail -5 "$D/train_${model}_b${batch}_$L.txt"
  done
done
el table
python3 results/h200-one-gpu/limits/speed_table.py "$D" | tee "$O/speed_table.md"
el done
