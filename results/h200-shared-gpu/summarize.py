#!/usr/bin/env python3
"""What results/h200-shared-gpu/run.sh a or b showed, from its work folder (Markdown on stdout).

  python3 results/h200-shared-gpu/summarize.py WORK_DIR

First one line per requirement (docs/multi-gpu.md, "Ranks sharing a GPU"; docs/measurement.md for
the definitions): PASS, FAIL, or "not in this call" where the call's records for it are absent (a
runs the plan's part 1 into WORK_DIR/plan; b writes WORK_DIR/records and WORK_DIR/gtest-np4). Then
the tables. Beside PyTorch DDP (ddp_bench.py records) only the quantities both measure by the same
definitions: the step, the step without communication (DDP's no_sync), comm cost = step - that
step with its spread, the gradients all-reduced alone, and hidden share = 1 - comm cost / all-reduce
alone. scalebench's own figures (the exposed tail after the backward, the backward's slowdown) are
a table of their own. The straggler runs; the fabric grid (all_reduce busbw at 64 MiB per setting
and repetition; a setting is faster only when its slowest repetition beats the other's fastest).
"""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch"))
from multi_gpu_tables import gtest_ranks, gtest_ranks_line, read_jsonl  # noqa: E402

SHARED_GPU_TESTS = 18  # the *SharedGpu* tests of tests/gpu/test_shared_gpu_training.cpp
FAULT_REPS = 10
FABRIC_REPS = 3  # repetitions of each fabric setting, interleaved (run.sh b)


def num(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


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
    """Both tools' records at every world size, by the same field names (docs/measurement.md)."""
    rows = []
    tools = (("train.jsonl", "scalebench"), ("ddp.jsonl", "torch DDP"))
    for name, tool in tools:
        for r in read_jsonl(os.path.join(records_dir, name)):
            if tool == "scalebench" and r.get("subcommand") != "train":
                continue
            workload = (os.path.splitext(os.path.basename(r["config"]["source"]))[0] if tool == "scalebench"
                        else r["workload"])
            median = lambda key: (r.get(key) or {}).get("median")  # noqa: E731
            rows.append(dict(workload=workload, tool=tool, batch=r["local_batch"], n=r["world_size"],
                             step=median("step_ms"), step_spread=r.get("step_spread_ms"),
                             no_comm=median("no_comm_step_ms"), cost=r.get("comm_cost_ms"),
                             cost_spread=r.get("comm_cost_spread_ms"), alone=r.get("allreduce_ms"),
                             hidden=r.get("hidden_fraction"), tail=median("exposed_comm_ms"),
                             slowdown=r.get("compute_slowdown_ms"), compute=median("compute_ms"),
                             no_comm_compute=median("no_comm_compute_ms"),
                             bucket_mb=r["config"]["bucket_mb"] if tool == "scalebench" else r["bucket_cap_mb"],
                             shared=r.get("shared_gpu"),
                             checks=(r.get("checks_passed") and r.get("allreduce_recheck", {}).get("passed"))
                             if tool == "scalebench" else None))
    return sorted(rows, key=lambda x: (x["workload"], x["n"], x["tool"]))


def implied_hidden(r):
    """The hidden share the row's own step times imply, and its spread: 1 - (step - no-comm step) / alone."""
    if None in (r["step"], r["no_comm"], r["alone"], r["cost_spread"]) or not r["alone"]:
        return None, None
    return 1 - (r["step"] - r["no_comm"]) / r["alone"], r["cost_spread"] / r["alone"]


def hidden_agrees(r):
    """The recorded hidden share agrees with what the step times imply, within the spread, and no
    more than the whole all-reduce is hidden (within the spread)."""
    implied, spread = implied_hidden(r)
    return (implied is not None and r["hidden"] is not None and abs(r["hidden"] - implied) <= spread + 1e-9
            and r["hidden"] <= 1 + spread)


def side_by_side_requirements(rows):
    at2 = {(r["workload"], r["tool"]): r for r in rows if r["n"] == 2}
    trained = [at2.get((w, "scalebench")) for w in ("bert-base", "resnet50")]
    checks = (verdict(all(r and r["checks"] and r["shared"] for r in trained)),
              "; ".join(f"{w}: " + ("no record at 2 ranks" if r is None else
                                    f"replicas and --recheck-allreduce {'passed' if r['checks'] else 'FAILED'}")
                        for w, r in zip(("bert-base", "resnet50"), trained)))
    pairs = [(w, at2.get((w, "scalebench")), at2.get((w, "torch DDP"))) for w in ("bert-base", "resnet50")]
    ok = all(s and d and s["bucket_mb"] == d["bucket_mb"] and hidden_agrees(s) and hidden_agrees(d)
             for _, s, d in pairs)
    words = []
    for w, s, d in pairs:
        if not (s and d):
            words.append(f"{w}: {'no scalebench row' if not s else 'no DDP row'} at 2 ranks")
            continue
        said = []
        for r in (s, d):
            implied, spread = implied_hidden(r)
            said.append(f"{r['tool']} hidden {pct(r['hidden'])} (its steps imply {pct(implied)} ± {pct(spread)}; "
                        f"comm cost {num(r['cost'])} ± {num(r['cost_spread'])} of {num(r['alone'])} ms alone)")
        words.append(f"{w}: " + ", ".join(said) + f", bucket {s['bucket_mb']:g} / {d['bucket_mb']:g} MB")
    return checks, (verdict(ok), "; ".join(words))


def pct(v):
    return "-" if v is None else f"{100 * v:.1f}%"


def named(records_dir, name):
    records = [r for r in read_jsonl(os.path.join(records_dir, f"{name}.jsonl")) if r.get("subcommand") == "train"]
    return None if not records else records[-1].get("straggler_check", {}).get("stragglers", [])


def straggler_words(found):
    if found is None:
        return "no record"
    return ", ".join(f"rank {s['rank']} on {s['host']} (GPU {s['gpu_bus_id']}) by {'+'.join(s.get('named_by', []))}: "
                     f"last at {100 * s.get('last_share', 0):.0f}% of buckets, {s.get('lag_ms', 0):.1f} ms after "
                     f"the others" for s in found) or "nobody named"


def straggler_requirement(records_dir):
    slowed, plain = named(records_dir, "straggler"), named(records_dir, "no-straggler")
    ok = (slowed is not None and [s["rank"] for s in slowed] == [1] and "arrival" in slowed[0].get("named_by", [])
          and slowed[0].get("gpu_bus_id", "-") != "-" and plain == [])
    return verdict(ok), f"rank 1 slowed by 30 ms: {straggler_words(slowed)}; no delay: {straggler_words(plain)}"


def fabric_rows(records_dir):
    rows = []
    for path in sorted(glob.glob(os.path.join(records_dir, "fabric-*.jsonl"))):
        setting, _, rep = os.path.basename(path)[len("fabric-"):-len(".jsonl")].rpartition("-r")
        for r in read_jsonl(path):
            if r.get("subcommand") == "comm":
                top = r["rows"][-1].get("out_of_place") or {}
                rows.append(dict(setting=setting, rep=int(rep), n=r["world_size"], busbw=top.get("busbw_gbps"),
                                 avg=r.get("avg_busbw_gbps"), wrong=r.get("out_of_bounds"),
                                 buffsize=r["environment"].get("tuning_variables", {}).get("NCCL_BUFFSIZE"),
                                 mps="CUDA_MPS_PIPE_DIRECTORY" in r["environment"].get("tuning_variables", {})))
    return rows


def fabric_settings(rows):
    """Per setting at 2 ranks: its busbw at 64 MiB in each repetition."""
    by = {}
    for r in rows:
        if r["n"] == 2 and r["busbw"] is not None:
            by.setdefault(r["setting"], []).append(r["busbw"])
    return by


def reliably_faster(a, b):
    """a is faster than b only when a's slowest repetition beats b's fastest: the difference
    exceeds the spread over the repeated runs."""
    return min(a) > max(b)


def fabric_choice(by):
    """The setting reliably faster than every other, or None."""
    for setting, reps in by.items():
        if all(reliably_faster(reps, other) for name, other in by.items() if name != setting):
            return setting
    return None


def fabric_requirement(rows):
    by = fabric_settings(rows)
    if not by:
        return verdict(False), "no all_reduce measured at 2 ranks"
    few = sorted(name for name, reps in by.items() if len(reps) < FABRIC_REPS)
    wrong = sum(r["wrong"] or 0 for r in rows)
    best = fabric_choice(by)
    beats_default = sorted(name for name, reps in by.items()
                           if name != "mode-default" and "mode-default" in by and reliably_faster(reps, by["mode-default"]))
    ok = not few and wrong == 0 and "mode-default" in by and not beats_default
    said = (f"{best} is reliably the fastest" if best else "no setting is reliably faster than every other")
    if beats_default:
        said += f"; reliably faster than the mode's default: {', '.join(beats_default)} (the default should change)"
    if few:
        said += f"; fewer than {FABRIC_REPS} repetitions: {', '.join(few)}"
    return verdict(ok), f"{said}; {wrong} wrong results"


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
        ("hidden share: scalebench's and DDP's agree with what their own step times imply (within the spread), "
         "bert-base and resnet50, same bucket", in_b, lambda: side),
        ("stragglers: the slowed rank named by arrival with host and bus id, nobody without", in_b,
         lambda: straggler_requirement(records_dir)),
        (f"fabric: each setting {FABRIC_REPS}+ times; no setting reliably faster than the mode's default", in_b,
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
        print("\n## Beside PyTorch DDP (bf16, bucket 25 MB): the same quantities by the same definitions\n")
        print("| workload | batch/rank | ranks | tool | step ms | ± | no-comm step ms | comm cost ms | ± | "
              "all-reduce alone ms | hidden | shared_gpu | checks |\n"
              "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
        for r in rows:
            print(f"| {r['workload']} | {r['batch']} | {r['n']} | {r['tool']} | {num(r['step'])} | "
                  f"{num(r['step_spread'])} | {num(r['no_comm'])} | {num(r['cost'])} | {num(r['cost_spread'])} | "
                  f"{num(r['alone'])} | {pct(r['hidden'])} | {'yes' if r['shared'] else 'NO'} | "
                  f"{'-' if r['checks'] is None else 'pass' if r['checks'] else 'FAIL'} |")
        print("\n## scalebench's own: the exposed tail and the backward's slowdown\n")
        print("| workload | ranks | compute ms | no-comm compute ms | backward slowdown ms | exposed tail ms |\n"
              "| --- | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            if r["tool"] == "scalebench":
                print(f"| {r['workload']} | {r['n']} | {num(r['compute'])} | {num(r['no_comm_compute'])} | "
                      f"{num(r['slowdown'])} | {num(r['tail'])} |")
    straggled = [(name, named(records_dir, name)) for name in ("straggler", "no-straggler")]
    if any(found is not None for _, found in straggled):
        print("\n## Stragglers (rank 1 delayed 30 ms a step, and none)\n")
        for name, found in straggled:
            print(f"- {name}: {straggler_words(found)}")
    if fabric:
        print("\n## The fabric: all_reduce busbw at 64 MiB, one setting changed from the mode's default\n")
        print("| setting | ranks | NCCL_BUFFSIZE | MPS | busbw per repetition GB/s | median | ± (half range) | "
              "#wrong |\n| --- | ---: | ---: | --- | --- | ---: | ---: | ---: |")
        settings = {}
        for r in fabric:
            settings.setdefault((r["setting"], r["n"]), []).append(r)
        for (setting, n), reps in sorted(settings.items()):
            values = [r["busbw"] for r in sorted(reps, key=lambda x: x["rep"]) if r["busbw"] is not None]
            med = statistics.median(values) if values else None
            half = (max(values) - min(values)) / 2 if values else None
            print(f"| {setting} | {n} | {reps[0]['buffsize'] or 'NCCL default'} | {'yes' if reps[0]['mps'] else 'no'} "
                  f"| {', '.join(f'{v:.3f}' for v in values)} | {num(med, 3)} | {num(half, 3)} | "
                  f"{sum(r['wrong'] or 0 for r in reps)} |")

if __name__ == "__main__":
    main()
