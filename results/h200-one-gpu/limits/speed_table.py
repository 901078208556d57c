#!/usr/bin/env python3
"""The speed table of results/h200-one-gpu/limits/speed.sh: per run and limits, samples/s (median step)
against the native run's, the attention backward's variant (the record's kernel_variants) and its
time per step from the op profile of the same command (ms_per_step of the attention_backward ops),
with the op profile's whole step (the sum of ms_per_step) beside it, so the difference between
limits can be read op by op.
    speed_table.py FOLDER     (train_<model>_b<batch>_<limits>.jsonl, opprof_*.jsonl)"""
import json
import sys
from pathlib import Path

LIMITS = ["native", "sm_89", "sm_80"]


def records(path, subcommand):
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("subcommand") == subcommand:
            out.append(r)
    return out


def main():
    folder = Path(sys.argv[1])
    runs = set()
    for p in folder.glob("train_*.jsonl"):
        stem = p.stem[len("train_"):]
        runs.update(stem[: -len(limits) - 1] for limits in LIMITS if stem.endswith("_" + limits))
    runs = sorted(runs, key=lambda r: (r.rsplit("_b", 1)[0], int(r.rsplit("_b", 1)[1])))
    print("| model | batch | limits | attention backward | samples/s | step ms | vs native | "
          "attention backward ms/step (op profile) | op-profile step ms |")
    print("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for run in runs:
        model, batch = run.rsplit("_b", 1)
        native = None
        for limits in LIMITS:
            train = records(folder / f"train_{run}_{limits}.jsonl", "train")
            prof = records(folder / f"opprof_{run}_{limits}.jsonl", "op_profile")
            if not train:
                print(f"| {model} | {batch} | {limits} | - | missing | | | | |")
                continue
            t = train[-1]
            sps = t["samples_per_s"]
            native = sps if limits == "native" else native
            variants = sorted({v for k, v in t.get("kernel_variants", {}).items() if k.startswith("attention_backward")})
            attn = sum(r["ms_per_step"] for r in prof if r["op"]["kind"] == "attention_backward")
            step = sum(r["ms_per_step"] for r in prof)
            ratio = f"{sps / native:.3f}" if native else "-"
            print(f"| {model} | {batch} | {limits} | {', '.join(variants) or '-'} | {sps:.1f} | "
                  f"{t['step_ms']['median']:.2f} | {ratio} | {attn:.3f} | {step:.2f} |")


if __name__ == "__main__":
    main()
