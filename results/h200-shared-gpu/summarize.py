#!/usr/bin/env python3
"""The tables of results/h200-shared-gpu/run.sh b, from its records folder (Markdown on stdout).

  python3 results/h200-shared-gpu/summarize.py RECORDS_DIR

Side by side, per workload at each world size: scalebench (train records) and PyTorch DDP
(ddp_bench.py records) with their step, exposed communication and the gradients all-reduced
alone, and the share of that all-reduce the backward hides: 1 - exposed / all-reduce alone.
scalebench's exposed communication is the step's wait on its buckets after the backward (device
events); DDP's is its step minus its no_sync step. Then the straggler runs and the fabric grid
(all_reduce busbw at 64 MiB and the sweep's average, per setting).
"""
import glob
import json
import os
import sys


def records(path):
    out = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def num(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def hidden(exposed, alone):
    if exposed is None or not alone:
        return None
    return 100 * (1 - exposed / alone)


def main():
    d = sys.argv[1]
    print("# Ranks sharing one H200 (--share-gpu): not hardware figures\n")
    rows = []
    for r in records(os.path.join(d, "train.jsonl")):
        if r.get("subcommand") != "train":
            continue
        name = os.path.splitext(os.path.basename(r["config"]["source"]))[0]
        exposed = r["exposed_comm_ms"]["median"]
        rows.append([name, r["local_batch"], r["world_size"], "scalebench", num(r["step_ms"]["median"]), "-",
                     num(exposed), num(r["allreduce_ms"]), num(hidden(exposed, r["allreduce_ms"]) if r["world_size"] > 1
                                                              else None),
                     "yes" if r.get("shared_gpu") else "NO",
                     "pass" if r.get("checks_passed") else "FAIL"])
    for r in records(os.path.join(d, "ddp.jsonl")):
        rows.append([r["workload"], r["local_batch"], r["world_size"], "torch DDP", num(r["step_ms"]["median"]),
                     num(r["no_sync_step_ms"]["median"]), num(r["exposed_comm_ms"]), num(r.get("allreduce_ms")),
                     num(r.get("hidden_fraction") and 100 * r["hidden_fraction"]),
                     "yes" if r.get("shared_gpu") else "NO", "-"])
    rows.sort(key=lambda x: (x[0], x[2], x[3]))
    print("| workload | batch/rank | ranks | tool | step ms | no_sync ms | exposed comm ms | all-reduce alone ms "
          "| hidden % | shared_gpu | checks |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")

    print("\n## Stragglers (SCALEBENCH_TEST_DELAY_RANK=1:30 against none)\n")
    for name in ("straggler", "no-straggler"):
        for r in records(os.path.join(d, f"{name}.jsonl")):
            if r.get("subcommand") != "train":
                continue
            check = r.get("straggler_check", {})
            named = [f"rank {s['rank']} on {s['host']} (GPU {s['gpu_bus_id']}) +{s['behind_ms']:.1f} ms"
                     for s in check.get("stragglers", [])]
            last = sorted({b["last_rank"] for b in check.get("buckets", [])})
            print(f"- {name}: {', '.join(named) or 'nobody named'}; compute per rank "
                  f"{', '.join(num(p['compute_ms'], 2) for p in check.get('per_rank', []))} ms; "
                  f"last to arrive in its buckets: rank(s) {last}")

    print("\n## The fabric: all_reduce, 2 ranks on the GPU unless named\n")
    print("| setting | busbw at 64 MiB GB/s | avg busbw GB/s | #wrong |")
    print("| --- | ---: | ---: | ---: |")
    for path in sorted(glob.glob(os.path.join(d, "fabric-*.jsonl"))):
        setting = os.path.basename(path)[len("fabric-"):-len(".jsonl")]
        for r in records(path):
            if r.get("subcommand") != "comm":
                continue
            top = r["rows"][-1].get("out_of_place") or {}
            print(f"| {setting} ({r['world_size']} ranks) | {num(top.get('busbw_gbps'), 3)} | "
                  f"{num(r.get('avg_busbw_gbps'), 3)} | {r.get('out_of_bounds')} |")


if __name__ == "__main__":
    main()
