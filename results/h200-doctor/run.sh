#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200 or H100 (one
# call, under 9 minutes):   results/h200-doctor/run.sh [OUTDIR]       (default: $OUT)
# Builds scalebench (CUDA, sm_90), then `scalebench doctor` twice: one rank on the GPU (the pair
# checks skip with their reason), and two ranks sharing it (--share-gpu: all_reduce, all_gather
# and reduce_scatter, each grown from 1 MiB until busbw levels off, and the control through NCCL's
# NET/Socket transport; the training tier at 1 and 2 ranks). Each run writes its Markdown report,
# its JSON (checks, bands and the snapshot they judge) and its stderr; nvidia-smi records the GPU
# meanwhile, the independent record the doctor's readings are checked against.
# OUTDIR receives three files, since the device tool returns at most eight: run.log (this
# script's output), summary.txt (PASS or FAIL per requirement) and doctor-run.tar.gz (every other
# file; packed again after each step, so a run cut short still returns what it wrote). Unpack
# with `tar -xzf doctor-run.tar.gz -C results/h200-doctor`.
set -uo pipefail
# The lent machine's rule: NCCL's NVLS stays off. One GPU has no NVLS to use, so the doctor's
# configuration row warns on the variable and nothing else changes.
export NCCL_NVLS_ENABLE=0
O=${1:-${OUT:?output folder}}
B=build-gpu
mkdir -p "$O"
W=$(mktemp -d /tmp/doctor-run.XXXXXX)  # every file but the log and the summary; packed into $O
pack() { tar -czf "$O/doctor-run.tar.gz.part" -C "$W" . && mv "$O/doctor-run.tar.gz.part" "$O/doctor-run.tar.gz"; }
smi=""
finish() { [[ -n $smi ]] && kill "$smi" 2>/dev/null; pack; }
trap finish EXIT
exec > >(tee "$O/run.log") 2>&1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root --oversubscribe)
{ nvidia-smi; nvidia-smi -q -d POWER,CLOCK,PERFORMANCE,ECC,ROW_REMAPPER,PCIE,COMPUTE; } >"$W/nvidia-smi.txt" 2>&1
# The settings the summary sets beside the doctor's own readings, one line per GPU.
nvidia-smi --query-gpu=name,pci.bus_id,memory.total,power.limit,power.default_limit,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max,persistence_mode,mig.mode.current,compute_mode,ecc.mode.current \
  --format=csv,noheader,nounits >"$W/nvidia-smi-settings.csv" 2>&1
el build
(cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
   cmake --build "$B" -j"$(nproc)" --target scalebench) >"$W/build.log" 2>&1 || { tail -30 "$W/build.log"; exit 1; }
nvidia-smi --query-gpu=timestamp,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown,power.draw,power.limit,power.default_limit,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,persistence_mode,mig.mode.current,compute_mode \
  --format=csv -lms 200 >"$W/nvidia-smi-samples.csv" 2>&1 &
smi=$!
doctor() {  # name seconds mpirun-args-and-command...
  local name=$1 secs=$2; shift 2
  el "doctor $name"
  timeout "$secs" mpirun "${root[@]}" --bind-to none "$@" --report "$W/$name.md" --snapshot-out "$W/$name.snapshot.json" \
    --json >"$W/$name.json" 2>"$W/$name.log"
  echo $? >"$W/$name.exit"; echo "   exit $(cat "$W/$name.exit")"; grep -E '^\*\*' "$W/$name.md"
  pack
}
doctor 1gpu 150 -np 1 "$B/scalebench" doctor
doctor 2ranks-shared 240 -np 2 "$B/scalebench" doctor --share-gpu
kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null; smi=""
# The recorded snapshot judged again gives the same exit code (the checks are pure functions of it).
"$B/scalebench" doctor --from-snapshot "$W/1gpu.snapshot.json" >"$W/1gpu.rejudged.txt" 2>&1; echo $? >"$W/1gpu.rejudged.exit"
python3 - "$W" <<'PY' | tee "$O/summary.txt"
import csv, json, sys
w = sys.argv[1]
def say(ok, what): print(("PASS" if ok else "FAIL") + "  " + what)
def load(name):
    try:
        return json.load(open(f"{w}/{name}.json"))
    except (OSError, ValueError) as e:
        say(False, f"{name}: no JSON from the doctor ({e}); see its .log in doctor-run.tar.gz")
        return None
def row(j, name): return next(c for c in j["checks"] if c["name"] == name)
one, two = load("1gpu"), load("2ranks-shared")
if one:
    g = one["snapshot"]["gpus"][0]
    # The profile of the card detected: an H200 or H100 SXM, whichever the machine holds.
    expected = {"NVIDIA H200": "h200-sxm", "NVIDIA H100 80GB HBM3": "h100-sxm"}.get(g.get("name", ""), "?")
    say(one["bands"]["profile"] == expected, f"the GPU names its profile ({g.get('name', '?')}: {expected}): {one['bands']['profile'] or one['bands']['why_none']} (link: {one['bands']['link']})")
    say(not one["exit_code"] & 64, f"one rank: every asked-for tier judged (exit {one['exit_code']}; unjudged rows: "
        + ", ".join(c["name"] for c in one["checks"] if c["verdict"] == "unjudged") + ")")
    say(int(open(f"{w}/1gpu.rejudged.exit").read()) == one["exit_code"], "the snapshot judged again gives the same exit code")
    say(min(g["persistence"], g["mig"], g["clocks_locked"], g["pcie_replays"], g["row_remap_pending"]) >= 0 and g["compute_mode"] != "",
        f"settings read: persistence {g['persistence']}, MIG {g['mig']}, compute {g['compute_mode']}, locked {g['clocks_locked']}, "
        f"replays {g['pcie_replays']}, remap pending {g['row_remap_pending']}, XIDs {g['xid_count']}")
    rates = row(one, "the card's GEMM and memory-copy rates")
    say(g["gemm_tflops"] > 0 and g["memory_copy_gbps"] > 0 and rates["verdict"] == "pass",
        f"card rates: TF32 GEMM {g['gemm_tflops']:.1f} TFLOP/s, copy {g['memory_copy_gbps']:.0f} GB/s ({rates['band']})")
    # nvidia-smi, read apart from the doctor, against the doctor's NVML readings of GPU0.
    try:
        s = next(csv.reader(open(f"{w}/nvidia-smi-settings.csv"), skipinitialspace=True))
        name, bus, mem, limit, default, clock, gen, width, pers, mig, compute, ecc = s
        on = lambda v: 1 if v.strip().lower() == "enabled" else 0
        agree = [("name", name == g["name"]), ("bus id", bus.lower().endswith(g["pci_bus_id"].lower()[-12:])),
                 ("memory within 2%", abs(float(mem) - g["memory_mib"]) <= 0.02 * float(mem)),
                 ("power limit", abs(float(limit) - g["power_limit_w"]) < 1), ("default power", abs(float(default) - g["power_default_w"]) < 1),
                 ("max SM clock", abs(float(clock) - g["sm_clock_max_mhz"]) < 1),
                 ("PCIe maximum", (int(gen), int(width)) == (g["pcie_max"]["gen"], g["pcie_max"]["width"])),
                 ("persistence", on(pers) == g["persistence"]), ("MIG", on(mig) == g["mig"]),
                 ("compute mode", compute.strip().lower() == g["compute_mode"]), ("ECC", on(ecc) == g["ecc_enabled"])]
        say(all(ok for _, ok in agree), "nvidia-smi agrees with the doctor on GPU0: " + ", ".join(f"{k} {'yes' if ok else 'NO'}" for k, ok in agree)
            + f" (nvidia-smi: {', '.join(s)})")
    except (OSError, StopIteration, ValueError) as e:
        say(False, f"nvidia-smi's settings could not be set beside the doctor's: {e}")
if two:
    run = next(c for c in two["snapshot"]["collectives"] if c["label"] == "as_is")
    ops = {r["op"] for r in run["rows"]}
    say(ops == {"all_reduce", "all_gather", "reduce_scatter"} and all(row(two, n)["verdict"] == "pass" for n in
        ("all-reduce, checked and timed", "all-gather, checked and timed", "reduce-scatter, checked and timed")),
        f"two ranks sharing the GPU: {sorted(ops)} checked element by element, transport: {row(two, 'transport NCCL chose')['figures']}")
    # Each collective names where its sweep stopped and why; the stop is its largest size.
    stops = {x["op"]: x for x in run.get("stops", [])}
    largest = {op: max(r["bytes"] for r in run["rows"] if r["op"] == op) for op in ops}
    say(set(stops) == ops and all(stops[op]["bytes"] == largest[op] and stops[op]["reason"] in
        ("levelled_off", "max_bytes", "memory") for op in ops),
        "sweeps stop where the rule says (no band when ranks share a GPU): " + ", ".join(
            f"{op} at {stops[op]['bytes'] / 2**20:.0f} MiB ({stops[op]['reason']})" for op in sorted(stops)))
    say(two["exit_code"] & 64 == 0, f"two ranks: exit {two['exit_code']}")
PY
el "done"
