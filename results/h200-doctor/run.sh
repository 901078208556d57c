#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-doctor/run.sh [OUTDIR]       (default: $OUT)
# Builds scalebench (CUDA, sm_90), then `scalebench doctor` twice: one rank on the GPU (the pair
# checks skip with their reason), and two ranks sharing it (--share-gpu: the all-reduce and its
# control through NCCL's NET/Socket transport, the training tier at 1 and 2 ranks). Each run writes
# its Markdown report, its JSON (checks, bands and the snapshot they judge) and its stderr;
# nvidia-smi samples the clock-event reasons, power, clocks and PCIe link meanwhile, the independent
# record the doctor's readings are checked against. Eight files in all (the device tool's limit).
set -uo pipefail
O=${1:-${OUT:?output folder}}
B=build-gpu
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root --oversubscribe)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
nvidia-smi -q -d POWER,CLOCK,PERFORMANCE,ECC >>"$O/nvidia-smi.txt" 2>&1
el build
(cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
   cmake --build "$B" -j"$(nproc)" --target scalebench) >/tmp/doctor-build.log 2>&1 || { tail -30 /tmp/doctor-build.log; exit 1; }
nvidia-smi --query-gpu=timestamp,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown,power.draw,power.limit,power.default_limit,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max \
  --format=csv -lms 200 >"$O/nvidia-smi-samples.csv" 2>&1 &
smi=$!
doctor() {  # name seconds mpirun-args-and-command...
  local name=$1 secs=$2; shift 2
  el "doctor $name"
  timeout "$secs" mpirun "${root[@]}" --bind-to none "$@" --report "$O/$name.md" --json >"$O/$name.json" 2>"$O/$name.log"
  echo "   exit $?"; grep -E '^\*\*' "$O/$name.md"
}
doctor 1gpu 110 -np 1 "$B/scalebench" doctor
doctor 2ranks-shared 150 -np 2 "$B/scalebench" doctor --share-gpu
kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
el done
