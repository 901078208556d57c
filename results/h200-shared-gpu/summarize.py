#!/usr/bin/env python3
"""What results/h200-shared-gpu/run.sh a or b showed, from its work folder (Markdown on stdout).

  python3 results/h200-shared-gpu/summarize.py WORK_DIR

First one line per requirement of the mode (docs/multi-gpu.md, "Ranks sharing a GPU"): PASS,
FAIL, or "not in this call" where the call's records for it are absent (a runs the plan's part 1
into WORK_DIR/plan; b writes WORK_DIR/records and WORK_DIR/gtest-np4). Then the tables: per
workload at each world size scalebench (train records) and PyTorch DDP (ddp_bench.py records) with
their step, exposed communication and the gradients all-reduced alone, and the share of that
all-reduce the backward hides, 1 - exposed / all-reduce alone (scalebench's exposed communication
is the step's wait on its buckets after the backward, from device events; DDP's its step minus
its no_sync step); the straggler runs; the fabric grid (all_reduce busbw at 64 MiB and the
sweep's average, per setting).
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch"))
from multi_gpu_tables import gtest_ranks, gtest_ranks_line, read_jsonl  # noqa: E402

SHARED_GPU_TESTS = 10  # the *SharedGpu* tests of tests/gpu/test_shared_gpu_training.cpp
FAULT_REPS = 10
STRAGGLER_MS = 2.0  # without the delay, nobody this far behind (tests/e2e/test_shared_gpu_cli.cpp)
FASTEST_WITHIN = 0.05  # the mode's default against the fastest setting of the grid


def num(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def hidden(exposed, alone):
    return None if exposed is None or not alone else 100 * (1 - exposed / alone)


def verdict(ok):
    return "PASS" if ok else "FAIL"


def gtest_requirement(folder, ranks):
    per_rank = gtest_ranks(folder)
    if not per_rank:
        return verdict(False), "no rank wrote its results"
    ok = (len(per_rank) == ranks and
          all(tests == SHARED_GPU_TESTS and failures == 0 and skipped == 0 for _, tests, failures, skipped, _ in per_rank))
    return verdict(ok), gtest_ranks_line(folder)


def comm_requirement(plan):
    records = [r for r in read_jsonl(os.path.join(plan, "details", "comm.jsonl")) if r.get("subcommand") == "comm"]
    if not records:
        return verdict(False), "no comm records"
    sizes = sorted({r["world_size"] for r in records})
    wrong = sum(r.get("out_of_bounds") or 0 for r in records)
    ok = wrong == 0 and sizes == [1, 2] and all(r.get("checks_passed") for r in records)
    return verdict(ok), f"{len({r['op'] for r in records})} collectives at world sizes {sizes}, {wrong} wrong"


def fault_requirement(plan):
    faults = read_jsonl(os.path.join(plan, "details", "faults", "report.jsonl"))
    if not faults:
        return verdict(False), "no fault runs"
    parts, ok = [], True
    for kind in ("SIGKILL", "SIGSTOP", "CUDA fault"):
        runs = [f for f in faults if f["fault"] == kind]
        passed = sum(bool(f.get("passed")) for f in runs)
        ends = [f["seconds_to_end"] for f in runs if f.get("seconds_to_end") is not None]
        failed = sorted({k for f in runs for k, v in f.get("checks", {}).items() if not v})
        ok = ok and passed >= FAULT_REPS
        parts.append(f"{kind} {passed} of {len(runs)}" + (f", ended within {max(ends):.1f} s" if ends else "")
                     + (f" ({', '.join(failed)} failed)" if failed else ""))
    return verdict(ok), "; ".join(parts)


def training_rows(records_dir):
    rows = []
    for r in read_jsonl(os.path.join(records_dir, "train.jsonl")):
        if r.get("subcommand") != "train":
            continue
        exposed = r["exposed_comm_ms"]["median"]
        rows.append(dict(workload=os.path.splitext(os.path.basename(r["config"]["source"]))[0], tool="scalebench",
                         batch=r["local_batch"], n=r["world_size"], step=r["step_ms"]["median"], no_sync=None,
                         exposed=exposed, alone=r["allreduce_ms"], bucket_mb=r["config"]["bucket_mb"],
                         hidden=hidden(exposed, r["allreduce_ms"]) if r["world_size"] > 1 else None,
                         shared=r.get("shared_gpu"),
                         checks=r.get("checks_passed") and r.get("allreduce_recheck", {}).get("passed")))
    for r in read_jsonl(os.path.join(records_dir, "ddp.jsonl")):
        rows.append(dict(workload=r["workload"], tool="torch DDP", batch=r["local_batch"], n=r["world_size"],
                         step=r["step_ms"]["median"], no_sync=r["no_sync_step_ms"]["median"],
                         exposed=r["exposed_comm_ms"], alone=r.get("allreduce_ms"), bucket_mb=r["bucket_cap_mb"],
                         hidden=None if r.get("hidden_fraction") is None else 100 * r["hidden_fraction"],
                         shared=r.get("shared_gpu"), checks=None))
    return sorted(rows, key=lambda x: (x["workload"], x["n"], x["tool"]))


def side_by_side_requirements(rows):
    at2 = {(r["workload"], r["tool"]): r for r in rows if r["n"] == 2}
    trained = [at2.get((w, "scalebench")) for w in ("bert-base", "resnet50")]
    checks = (verdict(all(r and r["checks"] and r["shared"] for r in trained)),
              "; ".join(f"{w}: " + ("no record at 2 ranks" if r is None else
                                    f"replicas and --recheck-allreduce {'passed' if r['checks'] else 'FAILED'}")
                        for w, r in zip(("bert-base", "resnet50"), trained)))
    pairs = [(w, at2.get((w, "scalebench")), at2.get((w, "torch DDP"))) for w in ("bert-base", "resnet50")]
    ok = all(s and d and s["hidden"] is not None and d["hidden"] is not None and s["bucket_mb"] == d["bucket_mb"]
             for _, s, d in pairs)
    words = []
    for w, s, d in pairs:
        if s and d:
            words.append(f"{w}: exposed {num(s['exposed'])} / {num(d['exposed'])} ms, hidden {num(s['hidden'])} / "
                         f"{num(d['hidden'])}% (scalebench / DDP, bucket {s['bucket_mb']:g} / {d['bucket_mb']:g} MB)")
        else:
            words.append(f"{w}: {'no scalebench row' if not s else 'no DDP row'} at 2 ranks")
    return checks, (verdict(ok), "; ".join(words))


def straggler_requirement(records_dir):
    def named(name):
        records = [r for r in read_jsonl(os.path.join(records_dir, f"{name}.jsonl")) if r.get("subcommand") == "train"]
        return None if not records else records[-1].get("straggler_check", {}).get("stragglers", [])
    slowed, plain = named("straggler"), named("no-straggler")
    ok = (slowed is not None and [s["rank"] for s in slowed] == [1] and plain is not None and
          all(s["behind_ms"] < STRAGGLER_MS for s in plain))
    words = lambda found: ("no record" if found is None else  # noqa: E731
                           ", ".join(f"rank {s['rank']} on {s['host']} (GPU {s['gpu_bus_id']}) +{s['behind_ms']:.1f} ms"
                                     for s in found) or "nobody named")
    return verdict(ok), f"rank 1 slowed by 30 ms: {words(slowed)}; no delay: {words(plain)}"


def fabric_rows(records_dir):
    rows = []
    for path in sorted(glob.glob(os.path.join(records_dir, "fabric-*.jsonl"))):
        setting = os.path.basename(path)[len("fabric-"):-len(".jsonl")]
        for r in read_jsonl(path):
            if r.get("subcommand") == "comm":
                top = r["rows"][-1].get("out_of_place") or {}
                rows.append(dict(setting=setting, n=r["world_size"], busbw=top.get("busbw_gbps"),
                                 avg=r.get("avg_busbw_gbps"), wrong=r.get("out_of_bounds"),
                                 buffsize=r["environment"].get("tuning_variables", {}).get("NCCL_BUFFSIZE"),
                                 mps="CUDA_MPS_PIPE_DIRECTORY" in r["environment"].get("tuning_variables", {})))
    return rows


def fabric_requirement(rows):
    two = [r for r in rows if r["n"] == 2 and r["busbw"] is not None]
    default = next((r for r in two if r["setting"] == "mode-default"), None)
    if not two:
        return verdict(False), "no all_reduce measured at 2 ranks"
    fastest = max(two, key=lambda r: r["busbw"])
    ok = default is not None and default["busbw"] >= (1 - FASTEST_WITHIN) * fastest["busbw"] and \
        all(r["wrong"] == 0 for r in rows)
    return verdict(ok), (f"the mode's default {num(default and default['busbw'], 2)} GB/s at 64 MiB, the fastest "
                         f"{fastest['setting']} {num(fastest['busbw'], 2)} GB/s")


def main():
    work = sys.argv[1]
    plan, records_dir = os.path.join(work, "plan"), os.path.join(work, "records")
    rows = training_rows(records_dir)
    checks, side = side_by_side_requirements(rows)
    fabric = fabric_rows(records_dir)
    in_a, in_b = os.path.isdir(plan), os.path.isdir(records_dir)  # which call made this folder
    requirements = [
        ("SharedGpu* GPU tests at 2 ranks, every rank", in_a,
         lambda: gtest_requirement(os.path.join(plan, "details", "gtest"), 2)),
        ("comm: every collective correct at 1 and 2 ranks", in_a, lambda: comm_requirement(plan)),
        (f"faults: {FAULT_REPS} of {FAULT_REPS} each, rank named, incomplete record, no crash", in_a,
         lambda: fault_requirement(plan)),
        ("SharedGpu* GPU tests at 4 ranks, every rank", in_b, lambda: gtest_requirement(os.path.join(work, "gtest-np4"), 4)),
        ("training at 2 ranks: replicas identical, --recheck-allreduce", in_b, lambda: checks),
        ("beside PyTorch DDP: exposed comm and hidden share, bert-base and resnet50, same bucket", in_b, lambda: side),
        ("stragglers: the slowed rank named with host and bus id, nobody without", in_b,
         lambda: straggler_requirement(records_dir)),
        ("fabric: the mode's default (NCCL_BUFFSIZE 16 MiB, MPS) the fastest measured", in_b,
         lambda: fabric_requirement(fabric)),
    ]
    print("# Ranks sharing one H200 (--share-gpu): not hardware figures\n")
    print("| requirement | verdict | what was seen |\n| --- | --- | --- |")
    for name, ran, judge in requirements:
        state, seen = judge() if ran else ("not in this call", "-")
        print(f"| {name} | {state} | {seen.replace('|', '/')} |")
    summary = os.path.join(plan, "summary.md")
    if os.path.exists(summary):
        print("\n## launch/multi_gpu_plan.sh --share-gpu 2 part1\n")
        print(open(summary).read().split("\n", 1)[1].strip())
    if rows:
        print("\n## Beside PyTorch DDP (bf16, bucket 25 MB)\n")
        print("| workload | batch/rank | ranks | tool | step ms | no_sync ms | exposed comm ms | all-reduce alone ms "
              "| hidden % | shared_gpu | checks |\n| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
        for r in rows:
            print(f"| {r['workload']} | {r['batch']} | {r['n']} | {r['tool']} | {num(r['step'])} | {num(r['no_sync'])} | "
                  f"{num(r['exposed'])} | {num(r['alone'])} | {num(r['hidden'])} | {'yes' if r['shared'] else 'NO'} | "
                  f"{'-' if r['checks'] is None else 'pass' if r['checks'] else 'FAIL'} |")
    if fabric:
        print("\n## The fabric: all_reduce busbw, one setting changed from the mode's default\n")
        print("| setting | ranks | NCCL_BUFFSIZE | MPS | busbw at 64 MiB GB/s | avg busbw GB/s | #wrong |\n"
              "| --- | ---: | ---: | --- | ---: | ---: | ---: |")
        for r in fabric:
            print(f"| {r['setting']} | {r['n']} | {r['buffsize'] or 'NCCL default'} | {'yes' if r['mps'] else 'no'} | "
                  f"{num(r['busbw'], 3)} | {num(r['avg'], 3)} | {r['wrong']} |")


if __name__ == "__main__":
    main()
