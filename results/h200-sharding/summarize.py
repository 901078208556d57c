#!/usr/bin/env python3
"""What results/h200-sharding/run.sh showed, from its records folder (Markdown on stdout).

  python3 results/h200-sharding/summarize.py RECORDS_DIR

One line per requirement (docs/sharding.md): PASS, FAIL, or "not in this call" where its records
are absent; then the table of GPT-2 large (at the world size its records name), scalebench's modes beside PyTorch's.
  equivalence   every sharded record's losses match the unsharded record of the same config and
                world size (relative 1e-4: fp32, dropout 0), and every record's checks passed;
  bytes         each sharded record's reduce-scatter bytes are 4 x the padded elements: >= 4 x
                num_params and <= 4 x (num_params + buckets x (n - 1)); its all-gather's the same
                elements in the compute dtype (2 bytes in bf16, 4 in fp32), every bucket once
                (parameters: every gather of the step, at least once and at most three times that: a
                bucket still in its slot when the backward reads it is not gathered again);
  memory        measured peak within 5% of the predicted total, each record of GPT-2 large;
  GPU tests     (run.sh parameters) the SharedGpuSharding tests at 2 and 4 ranks: every rank's XML
                shows every case run, none failed or skipped;
  refusal       the unsharded GPT-2 XL launch exits 2 before any step and names a sharding mode
                that fits (or the replica fits this GPU and nothing is refused: said so);
  step vs peer  scalebench's median step no slower than PyTorch's in the matching mode
                (none: DDP; optimizer: DDP + ZeroRedundancyOptimizer; gradients: FSDP2 reshard False;
                parameters: FSDP2 reshard True), one line per scalebench record (its bucket_mb);
  memory vs peer  scalebench's measured peak per rank within 10% of PyTorch's max_memory_allocated or
                below (the two count different things: scalebench its own allocations, PyTorch its
                caching allocator's, both without the CUDA context).
"""
import json
import os
import sys

PEER = {"none": "none", "optimizer": "optimizer", "gradients": "gradients", "parameters": "parameters"}


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def train_records(path):
    """The per-world-size train records (not the start and end records around a run)."""
    return [r for r in read_jsonl(path) if r.get("subcommand") == "train" and "step_ms" in r]


def verdict(ok):
    return "PASS" if ok else "FAIL"


def mode_of(r):
    return (r.get("sharding") or {}).get("mode", "none")


def equivalence(records):
    if not records:
        return "not in this call", "no equivalence records"
    base = {(r["model"], r["world_size"]): r for r in records if mode_of(r) == "none"}
    rows, ok = [], True
    for r in records:
        if mode_of(r) == "none":
            continue
        b = base.get((r["model"], r["world_size"]))
        if b is None:
            ok = False
            rows.append(f"{r['model']} {mode_of(r)} n={r['world_size']}: no unsharded record")
            continue
        d = max(abs(r[k] - b[k]) / max(abs(b[k]), 1e-12) for k in ("initial_loss", "final_loss"))
        good = d <= 1e-4 and r.get("checks_passed") and b.get("checks_passed")
        ok = ok and bool(good)
        rows.append(f"{r['model']} {mode_of(r)} n={r['world_size']}: loss differs by {d:.1e}")
    return verdict(ok and bool(rows)), "; ".join(rows)


def bytes_check(records):
    sharded = [r for r in records if mode_of(r) != "none"]
    if not sharded:
        return "not in this call", "no sharded records"
    ok = True
    for r in sharded:
        n, p, buckets = r["world_size"], r["num_params"], r["buckets"]
        rs = r["sharding"]["reduce_scatter"]["bytes"]
        ok = ok and rs == 4 * r["sharding"]["shard_elements"] * n and 4 * p <= rs <= 4 * (p + buckets * (n - 1))
        once = rs * (2 if r["config"]["precision"] in ("bf16", "fp16") else 4) / 4  # every bucket, compute dtype
        ag = r["sharding"]["all_gather"]["bytes"]
        # parameters: every gather of the step, each bucket as a pass reads it (about twice; once
        # where the slots hold every bucket, as the one-bucket ResNet's)
        ok = ok and (once <= ag <= 3 * once if mode_of(r) == "parameters" else ag == once)
    return verdict(ok), f"{len(sharded)} sharded records"


def memory_check(records):
    if not records:
        return "not in this call", "no GPT-2 large records"
    ratios = [(mode_of(r), r["memory_per_rank"]["peak_vs_predicted"]) for r in records]
    ok = all(0.95 <= x <= 1.05 for _, x in ratios)
    return verdict(ok), ", ".join(f"{m}: measured/predicted {x:.3f}" for m, x in ratios)


def refusal_check(folder):
    rc_path, log_path = os.path.join(folder, "refusal-xl-none.rc"), os.path.join(folder, "refusal-xl-none.log")
    if not os.path.exists(rc_path):
        return "not in this call", "no refusal launch"
    rc = open(rc_path).read().strip()
    log = open(log_path, errors="replace").read() if os.path.exists(log_path) else ""
    line = next((l for l in log.splitlines() if "needs" in l and "per rank" in l), "")
    if rc == "0":
        return "not exercised", "the unsharded GPT-2 XL fitted this GPU's share"
    return verdict(rc == "2" and "sharding: " in line and " fits " in line), f"exit {rc}: {line[:300]}"


def gpu_tests_check(folder):
    import glob
    import xml.etree.ElementTree as ElementTree
    files = sorted(glob.glob(os.path.join(folder, "gtest-np*-rank*.xml")))
    if not files:
        return "not in this call", "no test results"
    counts = []
    for path in files:
        suite = ElementTree.parse(path).getroot()
        tests, failures, errors = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors"))
        skipped = sum(1 for case in suite.iter("testcase") if case.find("skipped") is not None)
        counts.append((os.path.basename(path), tests, failures + errors, skipped))
    ok = len(files) == 6 and all(t > 0 and f == 0 and k == 0 for _, t, f, k in counts)
    return verdict(ok), "; ".join(f"{name}: {t} run, {f} failed, {k} skipped" for name, t, f, k in counts)


def main():
    folder = sys.argv[1]
    equiv = train_records(os.path.join(folder, "equiv-transformer.jsonl")) + train_records(
        os.path.join(folder, "equiv-resnet.jsonl"))
    large = train_records(os.path.join(folder, "large.jsonl"))
    peer = read_jsonl(os.path.join(folder, "peer.jsonl"))
    print("# Sharded data parallel on one GPU, ranks sharing it (run.log names the card)\n")
    print("| requirement | verdict | figures |\n| --- | --- | --- |")
    for name, (v, text) in [("equivalence with the unsharded step", equivalence(equiv)),
                            ("collective bytes as docs/sharding.md's formulas", bytes_check(equiv + large)),
                            ("measured memory within 5% of the prediction", memory_check(large)),
                            ("a run that does not fit is refused naming the mode", refusal_check(folder)),
                            ("the SharedGpuSharding tests on every rank", gpu_tests_check(folder))]:
        print(f"| {name} | {v} | {text} |")
    by_peer = {r["sharding"]: r for r in peer}
    for mode in ("none", "optimizer", "gradients", "parameters"):
        theirs = by_peer.get(PEER[mode])
        ours_all = [r for r in large if mode_of(r) == mode]
        if not ours_all or not theirs:
            print(f"| step and memory vs PyTorch, {mode} | not in this call | |")
            continue
        for ours in ours_all:
            step_ok = ours["step_ms"]["median"] <= theirs["step_ms"]["median"]
            mem_ok = ours["memory_per_rank"]["measured"]["peak_total"] <= 1.10 * theirs["peak_memory_bytes"]
            what = f"{mode}, bucket {ours['config']['bucket_mb']:g} MB"
            print(f"| step no slower than PyTorch's, {what} | {verdict(step_ok)} | {ours['step_ms']['median']:.1f} vs "
                  f"{theirs['step_ms']['median']:.1f} ms ({theirs['tool']}) |")
            print(f"| memory within 10% of PyTorch's or below, {what} | {verdict(mem_ok)} | "
                  f"{ours['memory_per_rank']['measured']['peak_total'] / 2**30:.2f} vs "
                  f"{theirs['peak_memory_bytes'] / 2**30:.2f} GiB |")
    sizes = sorted({r["world_size"] for r in large}) or ["no"]
    print(f"\n## GPT-2 large b2 bf16, {', '.join(map(str, sizes))} ranks sharing the GPU\n")
    print("| tool | mode | bucket MB | step ms | comm cost ms | gradient collective ms alone (none: all-reduce) | all-gather ms alone | "
          "peak GiB per rank | predicted GiB |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in large:
        sh = r.get("sharding") or {}
        rs = (sh.get("reduce_scatter") or {}).get("ms") or r.get("allreduce_ms") or float("nan")
        ag = (sh.get("all_gather") or {}).get("ms")
        mem = r["memory_per_rank"]
        cost = r.get("comm_cost_ms")
        print(f"| scalebench | {mode_of(r)} | {r['config']['bucket_mb']:g} | {r['step_ms']['median']:.1f} | {'-' if cost is None else f'{cost:.1f}'} "
              f"(step - no communication) | {rs:.1f} | {'-' if ag is None else f'{ag:.1f}'} | "
              f"{mem['measured']['peak_total'] / 2**30:.2f} | {mem['predicted']['total'] / 2**30:.2f} |")
    for r in peer:
        unit = "25" if r["sharding"] in ("none", "optimizer") else "a block"
        print(f"| {r['tool']} | {r['sharding']} | {unit} | {r['step_ms']['median']:.1f} | {r['comm_cost_ms']:.1f} "
              f"(step - no reduction) | - | - | {r['peak_memory_bytes'] / 2**30:.2f} | - |")


if __name__ == "__main__":
    main()
