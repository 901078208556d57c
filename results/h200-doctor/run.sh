#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200 (one call,
# under 9 minutes):   results/h200-doctor/run.sh [OUTDIR]       (default: $OUT)
# Builds scalebench (CUDA, sm_90), then `scalebench doctor` twice: one rank on the GPU (the pair
# checks skip with their reason), and two ranks sharing it (--share-gpu: all_reduce, all_gather
# and reduce_scatter and the control through NCCL's NET/Socket transport, the training tier at 1
# and 2 ranks). Each run writes its Markdown report, its JSON (checks, bands and the snapshot
# they judge) and its stderr; nvidia-smi records the GPU meanwhile, the independent record the
# doctor's readings are checked against. summary.txt says PASS or FAIL per requirement.
set -uo pipefail
# The lent machine's rule: NCCL's NVLS stays off. One GPU has no NVLS to use, so the doctor's
# configuration row warns on the variable and nothing else changes.
export NCCL_NVLS_ENABLE=0
O=${1:-${OUT:?output folder}}
B=build-gpu
mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root --oversubscribe)
{ nvidia-smi; nvidia-smi -q -d POWER,CLOCK,PERFORMANCE,ECC,ROW_REMAPPER,PCIE,COMPUTE; } >"$O/nvidia-smi.txt" 2>&1
el build
(cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
   cmake --build "$B" -j"$(nproc)" --target scalebench) >/tmp/doctor-build.log 2>&1 || { tail -30 /tmp/doctor-build.log; exit 1; }
nvidia-smi --query-gpu=timestamp,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown,power.draw,power.limit,power.default_limit,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,persistence_mode,mig.mode.current,compute_mode \
  --format=csv -lms 200 >"$O/nvidia-smi-samples.csv" 2>&1 &
smi=$!
doctor() {  # name seconds mpirun-args-and-command...
  local name=$1 secs=$2; shift 2
  el "doctor $name"
  timeout "$secs" mpirun "${root[@]}" --bind-to none "$@" --report "$O/$name.md" --snapshot-out "$O/$name.snapshot.json" \
    --json >"$O/$name.json" 2>"$O/$name.log"
  echo $? >"$O/$name.exit"; echo "   exit $(cat "$O/$name.exit")"; grep -E '^\*\*' "$O/$name.md"
}
doctor 1gpu 150 -np 1 "$B/scalebench" doctor
doctor 2ranks-shared 200 -np 2 "$B/scalebench" doctor --share-gpu
kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
# The recorded snapshot judged again gives the same exit code (the checks are pure functions of it).
"$B/scalebench" doctor --from-snapshot "$O/1gpu.snapshot.json" >"$O/1gpu.rejudged.txt" 2>&1; echo $? >"$O/1gpu.rejudged.exit"
python3 - "$O" <<'PY' | tee "$O/summary.txt"
import json, sys
o = sys.argv[1]
one, two = json.load(open(f"{o}/1gpu.json")), json.load(open(f"{o}/2ranks-shared.json"))
g = one["snapshot"]["gpus"][0]
def row(j, name): return next(c for c in j["checks"] if c["name"] == name)
def say(ok, what): print(("PASS" if ok else "FAIL") + "  " + what)
# The profile of the card detected: an H200 or H100 SXM, whichever the machine holds.
expected = {"NVIDIA H200": "h200-sxm", "NVIDIA H100 80GB HBM3": "h100-sxm"}.get(g.get("name", ""), "?")
say(one["bands"]["profile"] == expected, f"the GPU names its profile ({g.get('name', '?')}: {expected}): {one['bands']['profile'] or one['bands']['why_none']} (link: {one['bands']['link']})")
say(not one["exit_code"] & 64, f"one rank: every asked-for tier judged (exit {one['exit_code']}; unjudged rows: "
    + ", ".join(c["name"] for c in one["checks"] if c["verdict"] == "unjudged") + ")")
say(int(open(f"{o}/1gpu.rejudged.exit").read()) == one["exit_code"], "the snapshot judged again gives the same exit code")
say(min(g["persistence"], g["mig"], g["clocks_locked"], g["pcie_replays"], g["row_remap_pending"]) >= 0 and g["compute_mode"] != "",
    f"settings read: persistence {g['persistence']}, MIG {g['mig']}, compute {g['compute_mode']}, locked {g['clocks_locked']}, "
    f"replays {g['pcie_replays']}, remap pending {g['row_remap_pending']}, XIDs {g['xid_count']}")
say(g["gemm_tflops"] > 0 and g["memory_copy_gbps"] > 0 and row(one, "the card's GEMM and memory-copy rates")["verdict"] == "pass",
    f"card rates: TF32 GEMM {g['gemm_tflops']:.1f} TFLOP/s, copy {g['memory_copy_gbps']:.0f} GB/s ({row(one, 'the card' + chr(39) + 's GEMM and memory-copy rates')['band']})")
ops = {r["op"] for r in next(c for c in two["snapshot"]["collectives"] if c["label"] == "as_is")["rows"]}
say(ops == {"all_reduce", "all_gather", "reduce_scatter"} and all(row(two, n)["verdict"] == "pass" for n in
    ("all-reduce, checked and timed", "all-gather, checked and timed", "reduce-scatter, checked and timed")),
    f"two ranks sharing the GPU: {sorted(ops)} checked element by element, transport: {row(two, 'transport NCCL chose')['figures']}")
say(two["exit_code"] & 64 == 0, f"two ranks: exit {two['exit_code']}")
PY
el done
