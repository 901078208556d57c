#!/usr/bin/env python3
"""Compares `scalebench comm` tables with NVIDIA nccl-tests' tables of the same sweep.

Both print nccl-tests' columns, so one parser reads both. Each side may be given several
runs (alternated in one command); each figure is their median per size. For every size in
both, out-of-place and in-place: time (us) and busbw (GB/s), the ratio scalebench /
nccl-tests, and the targets docs/comm.md states: time within 5% below 1 KB, and busbw within 3% from
1 MB up. On one rank busbw is 0 by definition, so algbw is compared instead, and only out
of place: in place on one rank moves no data (both time only the host's issue cost).
Prints a table, writes JSON lines with --out, exits 1 on a miss.

    compare_nccl_tests.py --scalebench A.txt [B.txt ...] --nccl-tests X.txt [Y.txt ...] [--out F.jsonl]
"""
import argparse
import json
import statistics
import sys


def parse(path):
    """{size_bytes: (oop_time, oop_algbw, oop_busbw, ip_time, ip_algbw, ip_busbw)}, world size."""
    rows, ranks = {}, set()
    for line in open(path, encoding="utf-8", errors="replace"):
        text = line.strip()
        if text.startswith("#") and " Rank " in f" {text[1:]} " and "device" in text:
            ranks.add(text.split()[2])
        if not text or text.startswith("#"):
            continue
        f = text.split()
        # size count type redop root time algbw busbw #wrong time algbw busbw #wrong
        if len(f) < 13 or not f[0].isdigit():
            continue
        try:
            values = [float(f[i]) for i in (5, 6, 7, 9, 10, 11)]
        except ValueError:
            continue
        rows[int(f[0])] = values
    return rows, max(len(ranks), 1)


def median_of_runs(paths):
    """Per size, the median of each column over the runs that have the size."""
    runs = [parse(p) for p in paths]
    sizes = set.intersection(*(set(rows) for rows, _ in runs))
    merged = {size: [statistics.median(rows[size][i] for rows, _ in runs) for i in range(6)] for size in sizes}
    return merged, runs[0][1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scalebench", nargs="+", required=True)
    ap.add_argument("--nccl-tests", nargs="+", required=True)
    ap.add_argument("--out")
    args = ap.parse_args()
    ours, world = median_of_runs(args.scalebench)
    theirs, _ = median_of_runs(args.nccl_tests)
    common = sorted(set(ours) & set(theirs))
    if not common:
        sys.exit(f"no size appears in both {args.scalebench} and {args.nccl_tests}")
    bw_index, bw_name = (2, "busbw") if world > 1 else (1, "algbw")
    print(f"# world size {world}, median of {len(args.scalebench)} scalebench and {len(args.nccl_tests)} nccl-tests "
          f"runs: comparing time below 1 KB and {bw_name} from 1 MB up")
    print(f"{'size':>12} {'place':>5} {'sb us':>9} {'nt us':>9} {'t ratio':>8} "
          f"{'sb ' + bw_name:>10} {'nt ' + bw_name:>10} {'bw ratio':>9}  target")
    records, misses, time_ratios, bw_ratios = [], 0, [], []
    for size in common:
        for place, off in (("out", 0), ("in", 3)):
            t_sb, t_nt = ours[size][off], theirs[size][off]
            bw_sb, bw_nt = ours[size][off + bw_index], theirs[size][off + bw_index]
            t_ratio = t_sb / t_nt if t_nt > 0 else float("nan")
            bw_ratio = bw_sb / bw_nt if bw_nt > 0 else float("nan")
            target = ""
            # Within, either way: faster than nccl-tests is as wrong a number as slower.
            if size < 1024:
                ok = abs(t_ratio - 1) <= 0.05
                target = f"time within 5%: {'ok' if ok else 'MISS'}"
                time_ratios.append(t_ratio)
                misses += not ok
            elif size >= 1 << 20 and (world > 1 or place == "out"):
                ok = abs(bw_ratio - 1) <= 0.03
                target = f"{bw_name} within 3%: {'ok' if ok else 'MISS'}"
                bw_ratios.append(bw_ratio)
                misses += not ok
            print(f"{size:>12} {place:>5} {t_sb:>9.2f} {t_nt:>9.2f} {t_ratio:>8.3f} "
                  f"{bw_sb:>10.2f} {bw_nt:>10.2f} {bw_ratio:>9.3f}  {target}")
            records.append({"size_bytes": size, "placement": place, "scalebench_time_us": t_sb,
                            "nccl_tests_time_us": t_nt, "time_ratio": t_ratio, "bandwidth": bw_name,
                            "scalebench_bw_gbps": bw_sb, "nccl_tests_bw_gbps": bw_nt, "bw_ratio": bw_ratio,
                            "target": target, "world_size": world})
    if time_ratios:
        worst = max(time_ratios, key=lambda r: abs(r - 1))
        print(f"# below 1 KB: median time ratio {statistics.median(time_ratios):.3f}, furthest from 1 {worst:.3f}")
    if bw_ratios:
        worst = max(bw_ratios, key=lambda r: abs(r - 1))
        print(f"# from 1 MB: median {bw_name} ratio {statistics.median(bw_ratios):.3f}, furthest from 1 {worst:.3f}")
    print(f"# {misses} target miss(es)")
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    sys.exit(1 if misses else 0)


if __name__ == "__main__":
    main()
