#!/usr/bin/env python3
"""The tables of launch/multi_gpu_plan.sh (docs/multi-gpu.md) from what OUTDIR/details holds.

Writes OUTDIR/scaling.md, ddp.md, comm.md, faults.md, projection.md and summary.md (prints the
last). Works on any subset: a table whose records are missing says so. Standard library only.

  python3 launch/multi_gpu_tables.py OUTDIR
"""
import glob
import json
import os
import re
import sys

POINTS = 3.0      # efficiency: scalebench against DDP, projection against measurement (points)
STEP_ERROR = 0.10  # projection against measurement: step time


def read_jsonl(path):
    records = []
    if os.path.exists(path):
        with open(path, errors="replace") as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a torn last line: the records before it stand
    return records


def med(r, key):
    v = r.get(key)
    return v.get("median") if isinstance(v, dict) else v


def pct(v, digits=1):
    return "-" if v is None else f"{100 * v:.{digits}f}%"


def num(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "".join(" --- |" for _ in header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


class Details:
    def __init__(self, outdir):
        d = os.path.join(outdir, "details")
        self.dir = d
        self.steps = []
        if os.path.exists(os.path.join(d, "steps.tsv")):
            for line in open(os.path.join(d, "steps.tsv")):
                fields = line.rstrip("\n").split("\t")
                if len(fields) == 5:
                    self.steps.append(dict(zip(("part", "name", "status", "rc", "seconds"), fields)))
        # train runs: label, graphs, bucket -> records (one per world size, the latest of each)
        self.train = {}
        for path in sorted(glob.glob(os.path.join(d, "train", "train.*.jsonl"))):
            m = re.fullmatch(r"train\.(.+)\.graphs-(on|off)\.bucket-([0-9.]+)\.jsonl", os.path.basename(path))
            if not m:
                continue
            by_n = {}
            for r in read_jsonl(path):
                if r.get("subcommand") == "train":
                    by_n[r["world_size"]] = r
            incomplete = [r for r in read_jsonl(path) if r.get("subcommand") == "incomplete"]
            self.train[(m.group(1), m.group(2), m.group(3))] = {"by_n": by_n, "incomplete": incomplete}
        self.labels = sorted({k[0] for k in self.train} | {os.path.basename(p).split(".")[0]
                                                           for p in glob.glob(os.path.join(d, "configs", "*.yaml"))})
        self.ddp = {}
        for r in read_jsonl(os.path.join(d, "ddp.jsonl")):
            self.ddp.setdefault((r["workload"], r["local_batch"]), {})[r["world_size"]] = r
        self.comm = [r for r in read_jsonl(os.path.join(d, "comm.jsonl")) if r.get("subcommand") == "comm"]
        # Every fault run (repetitions of one fault are rows of their own).
        self.faults = list(read_jsonl(os.path.join(d, "faults", "report.jsonl")))
        self.project = {}
        for path in glob.glob(os.path.join(d, "project", "*.jsonl")):
            base = os.path.basename(path)[:-len(".jsonl")]
            if base == "comm-1gpu":
                continue
            label, _, kind = base.partition(".")
            self.project[(label, kind or "one-gpu")] = {r["world_size"]: r for r in read_jsonl(path)
                                                        if r.get("subcommand") == "project"}

    def main_run(self, label):
        return self.train.get((label, "on", "25"), {}).get("by_n", {})

    def any_record(self):
        for run in self.train.values():
            for r in run["by_n"].values():
                return r
        return None


def gpu_words(details):
    r = details.any_record()
    if not r:
        return "no train records yet"
    env = r.get("environment", {})
    gpu = env.get("gpu", {}) if isinstance(env.get("gpu"), dict) else {}
    name = gpu.get("name") or r.get("backend", "?")
    hosts = env.get("hostnames") or ["?"]
    return f"{name}, {r.get('launched_world_size')} rank(s) on {hosts[0]}, backend {r.get('backend')}"


def scaling_md(dt):
    lines = ["# Scaling: `scalebench train`, weak scaling (batch per GPU fixed)\n\n",
             "Measured by launch/multi_gpu_plan.sh; efficiency = samples/s(n) / (n x samples/s(1)) of the same "
             "launch; exposed comm = time the step waited on bucket all-reduces after the backward; busbw of the "
             "gradient all-reduce timed alone (nccl-tests' definition). Step figures: median over the measured "
             "steps of the slowest rank.\n"]
    rows = []
    for label in dt.labels:
        for n, r in sorted(dt.main_run(label).items()):
            rows.append([label, n, r.get("local_batch"), num(r.get("samples_per_s"), 1),
                         num(med(r, "step_ms"), 3), num(med(r, "compute_ms"), 3), num(med(r, "exposed_comm_ms"), 3),
                         num(med(r, "optimizer_ms"), 3), num(r.get("allreduce_busbw_gbps"), 1),
                         r.get("buckets"), pct(r.get("scaling_efficiency")),
                         "yes" if r.get("checks_passed") else "NO"])
    lines.append("\n## CUDA graphs on, bucket_mb 25 (each workload's full scaling list)\n\n")
    lines.append(table(["workload", "GPUs", "batch/GPU", "samples/s", "step ms", "compute ms", "exp. comm ms",
                        "optimizer ms", "busbw GB/s", "buckets", "efficiency", "replicas identical"], rows)
                 if rows else "No records yet (part2).\n")
    lines.append("\n## Variants at the largest GPU count: efficiency (exposed comm ms, busbw GB/s)\n\n")
    buckets = ["1", "25", "100"]
    rows = []
    for label in dt.labels:
        for graphs in ("on", "off"):
            cells = []
            for b in buckets:
                by_n = dt.train.get((label, graphs, b), {}).get("by_n", {})
                top = max(by_n) if by_n else None
                r = by_n.get(top) if top and top > 1 else None
                cells.append(f"{pct(r.get('scaling_efficiency'))} ({num(med(r, 'exposed_comm_ms'), 2)}, "
                             f"{num(r.get('allreduce_busbw_gbps'), 0)}) at {top}" if r else "-")
            if any(c != "-" for c in cells):
                rows.append([label, graphs] + cells)
    lines.append(table(["workload", "CUDA graphs", "bucket_mb 1", "bucket_mb 25", "bucket_mb 100"], rows)
                 if rows else "No multi-GPU variant records yet (part3).\n")
    cut = [(k, run["incomplete"]) for k, run in dt.train.items() if run["incomplete"]]
    if cut:
        lines.append("\nRuns cut short (their incomplete record):\n")
        lines += [f"- {k[0]} graphs {k[1]} bucket {k[2]}: {inc[-1].get('error')}\n" for k, inc in cut]
    return "".join(lines)


def residual(step1, step_n, exposed):
    """Efficiency with the exposed communication taken out of the N-GPU step."""
    if None in (step1, step_n, exposed) or step_n - exposed <= 0:
        return None
    return step1 / (step_n - exposed)


def ddp_rows(dt):
    rows = []
    for label in dt.labels:
        sb = dt.main_run(label)
        if not sb:
            continue
        batch = next(iter(sb.values())).get("local_batch")
        peer = next((v for (w, b), v in dt.ddp.items() if b == batch and label.startswith(w)), None)
        if not peer:
            continue
        common = sorted(set(sb) & set(peer))
        top = common[-1] if common else None
        if not top or top < 2 or 1 not in common:
            continue
        s, d = sb[top], peer[top]
        s_eff, d_eff = s.get("scaling_efficiency"), d.get("scaling_efficiency")
        s_res = residual(med(sb[1], "step_ms"), med(s, "step_ms"), s.get("comm_cost_ms"))
        d_res = residual(med(peer[1], "step_ms"), med(d, "step_ms"), d.get("comm_cost_ms"))
        delta = 100 * (s_eff - d_eff)
        if abs(delta) <= POINTS:
            verdict = f"within ±{POINTS:g} points"
        elif s_res is not None and d_res is not None and abs(100 * (s_res - d_res)) <= POINTS:
            verdict = (f"explained by comm cost: {s['comm_cost_ms']:.2f} vs {d['comm_cost_ms']:.2f} ms "
                       f"a step; without it {pct(s_res)} vs {pct(d_res)}")
        else:
            slow_sb = med(s, "compute_ms") / med(sb[1], "compute_ms") if med(sb[1], "compute_ms") else None
            slow_ddp = med(d, "no_comm_step_ms") / med(peer[1], "step_ms") if med(peer[1], "step_ms") else None
            verdict = (f"NOT explained by comm cost (without it {pct(s_res)} vs {pct(d_res)}); compute at {top} "
                       f"GPUs / at 1: scalebench {num(slow_sb, 3)}x, DDP no_sync {num(slow_ddp, 3)}x")
        rows.append(dict(label=label, n=top, s=s, d=d, delta=delta, verdict=verdict, s_res=s_res, d_res=d_res,
                         within=abs(delta) <= POINTS, explained=verdict.startswith("explained")))
    return rows


def ddp_md(dt):
    lines = ["# scalebench against PyTorch DDP on the same GPUs\n\n",
             "DDP: tests/reference/ddp_bench.py under torchrun (the single-GPU peers' models, bf16 autocast, "
             "bucket_cap_mb 25); scalebench: CUDA graphs on, bucket_mb 25. Both weak scaling in one launch over "
             "the scaling list. Comm cost, both by one definition (docs/measurement.md): median step less the median "
             "step without the gradient all-reduce at the same GPU count (scalebench's no-communication steps, DDP's "
             "no_sync(); the same kernels). 'Without it': the "
             f"efficiency with the comm cost taken out of the N-GPU step. A gap over ±{POINTS:g} points counts as "
             "explained when the two efficiencies without comm cost agree within that.\n\n"]
    rows = ddp_rows(dt)
    lines.append(table(["workload", "GPUs", "same parameters", "scalebench eff.", "DDP eff.", "difference (points)",
                        "samples/s scalebench / DDP", "comm cost ms scalebench / DDP", "verdict"],
                       [[r["label"], r["n"], "yes" if r["s"].get("num_params") == r["d"].get("num_params") else
                         f"NO: {r['s'].get('num_params')} / {r['d'].get('num_params')}",
                         pct(r["s"].get("scaling_efficiency")), pct(r["d"].get("scaling_efficiency")),
                         f"{r['delta']:+.1f}", f"{r['s']['samples_per_s']:.1f} / {r['d']['samples_per_s']:.1f} "
                         f"({r['s']['samples_per_s'] / r['d']['samples_per_s']:.2f}x)",
                         f"{num(r['s'].get('comm_cost_ms'), 3)} / {num(r['d'].get('comm_cost_ms'), 3)}", r["verdict"]]
                        for r in rows]) if rows else "No pair of scalebench and DDP records at 2 or more GPUs yet.\n")
    if dt.ddp:
        lines.append("\n## DDP at every world size\n\n")
        lines.append(table(["workload", "batch/GPU", "GPUs", "samples/s", "step ms", "no_sync ms", "comm cost ms",
                            "efficiency"],
                           [[w, b, n, num(r["samples_per_s"], 1), num(med(r, "step_ms"), 3),
                             num(med(r, "no_comm_step_ms"), 3), num(r.get("comm_cost_ms"), 3),
                             pct(r.get("scaling_efficiency"))]
                            for (w, b), by_n in sorted(dt.ddp.items()) for n, r in sorted(by_n.items())]))
    return "".join(lines)


def comm_md(dt):
    lines = ["# `scalebench comm --op all`: bus bandwidth per collective and GPU count\n\n",
             "busbw (GB/s, nccl-tests' definition) at the largest message, out of place; fit: the alpha-beta fit's "
             "bandwidth over all sizes (what `project --calibrate` takes). One rank: the collective is a device "
             "copy (busbw 0 by definition); its algbw is shown.\n\n"]
    if not dt.comm:
        return "".join(lines) + "No comm records yet (part1).\n"
    sizes = sorted({r["world_size"] for r in dt.comm})
    ops = []
    for r in dt.comm:
        if r["op"] not in ops:
            ops.append(r["op"])
    rows = []
    for op in ops:
        row = [op]
        for n in sizes:
            r = next((x for x in dt.comm if x["op"] == op and x["world_size"] == n), None)
            if not r or not r.get("rows"):
                row.append("-")
                continue
            last = r["rows"][-1].get("out_of_place") or r["rows"][-1].get("in_place") or {}
            fit = (r.get("fit") or {}).get("beta_busbw_gbps")
            wrong = r.get("out_of_bounds", 0)
            if n == 1:
                cell = f"algbw {num(last.get('algbw_gbps'), 0)}"
            else:
                cell = f"{num(last.get('busbw_gbps'), 1)} (fit {num(fit, 1)})"
            row.append(cell + (f", {wrong} WRONG" if wrong else ""))
        rows.append(row)
    top = max(x["max_bytes"] for x in dt.comm)
    lines.append(f"Largest message {top / 2**20:g} MiB.\n\n")
    lines.append(table(["collective"] + [f"{n} GPU(s)" for n in sizes], rows))
    return "".join(lines)


def headline(fault):
    """The line that says what ended the job: scalebench's error, else mpirun's notice."""
    messages = fault.get("messages") or []
    for marker in ("scalebench: error", "noticed that process"):
        for line in messages:
            if marker in line:
                return line.strip()
    return messages[-1].strip() if messages else fault.get("error", "")


def faults_md(dt):
    lines = ["# Peer faults on NCCL (tests/faults/peer_fault.py)\n\n",
             "One rank of a running `train --scaling 1,N` signalled (or its CUDA work made to fail) once the n = 1 "
             "record is written and the N-rank steps run. Checked: the job ends non-zero with every rank gone within the collective timeout plus the "
             "watchdog's grace and 10 s to tear down; the failed rank and its host singled out in the output; the "
             "n = 1 record intact and an incomplete record last; no rank crashed on the way out.\n\n"]
    if not dt.faults:
        return "".join(lines) + "No fault runs in this folder (part1; they need 2 or more GPUs).\n"
    rows = []
    for f in dt.faults:
        c = f.get("checks", {})
        rec = f.get("records", {})
        yes = lambda k: "-" if k not in c else ("yes" if c[k] else "NO")  # noqa: E731
        rows.append([f["fault"], f"{f['rank']} ({f['host']})",
                     f"{num(f.get('seconds_to_end'), 1)} (bound {f['bound_s']:g})", f.get("exit_code", "-"),
                     yes("ended"), yes("named"), yes("records"), yes("no crash"),
                     f"{rec.get('intact_world_sizes', '-')} then {rec.get('last', {}).get('subcommand', '-')}",
                     "yes" if f.get("collective_named") else "no", "PASS" if f.get("passed") else "FAIL",
                     headline(f)[:200].replace("|", "/")])
    lines.append(table(["fault", "rank (host)", "seconds to end", "exit", "all ended", "rank named", "records",
                        "no crash", "records (world sizes)", "names all_reduce", "verdict", "last message"], rows))
    return "".join(lines)


def projection_rows(dt, kind):
    rows = []
    for label in dt.labels:
        proj = dt.project.get((label, kind), {})
        meas = dt.main_run(label)
        for n in sorted(set(proj) & set(meas)):
            p, m = proj[n], meas[n]
            ms, ps = med(m, "step_ms"), med(p, "step_ms")
            me, pe = m.get("scaling_efficiency"), p.get("scaling_efficiency")
            err = ps / ms - 1 if ms else None
            deff = 100 * (pe - me) if None not in (pe, me) else None
            ok = n >= 2 and err is not None and abs(err) <= STEP_ERROR and deff is not None and abs(deff) <= POINTS
            rows.append(dict(label=label, n=n, ms=ms, ps=ps, err=err, me=me, pe=pe, deff=deff, ok=ok,
                             mc=med(m, "exposed_comm_ms"), pc=med(p, "exposed_comm_ms")))
    return rows


def projection_md(dt):
    lines = ["# `project --hardware h200-sxm --calibrate` against the measured scaling\n\n",
             "Projected from this folder's one-GPU records only (op profiles, their one-GPU train records, the "
             "one-rank comm records); measured: `train` with CUDA graphs on, bucket_mb 25. Acceptance at 2 or more "
             f"GPUs: step time within {100 * STEP_ERROR:g}%, efficiency within {POINTS:g} points. The second table "
             "adds the measured multi-GPU comm records to the calibration (the fabric measured, not modelled).\n\n"]
    for kind, title in (("one-gpu", "## From one-GPU records\n\n"), ("fabric", "\n## With the measured comm records too\n\n")):
        rows = projection_rows(dt, kind)
        lines.append(title)
        lines.append(table(["workload", "GPUs", "step ms measured", "projected", "error", "exp. comm ms measured / "
                            "projected", "efficiency measured", "projected", "difference (points)", "verdict"],
                           [[r["label"], r["n"], num(r["ms"], 3), num(r["ps"], 3),
                             "-" if r["err"] is None else f"{100 * r['err']:+.1f}%", f"{num(r['mc'], 3)} / {num(r['pc'], 3)}",
                             pct(r["me"]), pct(r["pe"]), "-" if r["deff"] is None else f"{r['deff']:+.1f}",
                             "-" if r["n"] < 2 else ("within" if r["ok"] else "MISS")] for r in rows])
                     if rows else "No projection with a measured run beside it yet (part2 and part3).\n")
    return "".join(lines)


def gtest_ranks(folder):
    """Per rank, from the rank*.xml files GoogleTest wrote (one a rank: the test main prints rank
    0's results only): (rank, tests, failures, skipped, ["Suite.test: file:line and message"])."""
    import xml.etree.ElementTree as ET
    ranks = []
    for path in sorted(glob.glob(os.path.join(folder, "rank*.xml")), key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0)):
        rank = int(re.sub(r"\D", "", os.path.basename(path)) or 0)
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            ranks.append((rank, 0, 1, 0, [f"{os.path.basename(path)}: not whole XML (the rank ended mid-run)"]))
            continue
        failed, skipped = [], 0
        for case in root.iter("testcase"):
            skipped += case.get("result") == "skipped"
            for failure in case.findall("failure"):
                message = " ".join((failure.get("message") or "").split())
                failed.append(f"{case.get('classname')}.{case.get('name')}: {message[:160]}")
        ranks.append((rank, int(root.get("tests", 0)), len(failed), skipped, failed))
    return ranks


def gtest_ranks_line(folder):
    """'rank 0: 10 passed; rank 1: 9 passed, 1 failed (...)', or None without XML files."""
    ranks = gtest_ranks(folder)
    if not ranks:
        return None
    parts = []
    for rank, tests, failures, skipped, failed in ranks:
        failing_tests = len({f.split(": ")[0] for f in failed})
        text = f"rank {rank}: {tests - failing_tests - skipped} passed"
        if skipped:
            text += f", {skipped} skipped"
        if failed:
            text += f", {failing_tests} failed ({'; '.join(failed[:3])[:300]})"
        parts.append(text)
    return "; ".join(parts)


def gpu_tests_line(dt):
    per_rank = gtest_ranks_line(os.path.join(dt.dir, "gtest"))
    if per_rank:
        return per_rank
    path = os.path.join(dt.dir, "logs", "gpu_tests.log")
    if not os.path.exists(path):
        return None
    text = open(path, errors="replace").read()
    passed = re.findall(r"\[  PASSED  \] (\d+) test", text)
    failed = re.findall(r"\[  FAILED  \] (\d+) test", text)
    skipped = re.findall(r"\[  SKIPPED \] (\d+) test", text)
    return (f"{len(passed)} rank(s) reported {passed[0] if passed else 0} passed"
            + (f", {len(failed)} reported failures ({', '.join(failed)} tests)" if failed else "")
            + (f", skipped on a rank: {', '.join(skipped)}" if skipped else ""))


def summary_md(dt):
    cpu = (dt.any_record() or {}).get("backend") == "cpu"
    lines = ["# Multi-GPU plan: summary\n\n",
             f"Machine: {gpu_words(dt)}.\n"]
    if cpu:
        lines.append("CPU rehearsal (--cpu): these figures say nothing about GPUs.\n")
    bad = [s for s in dt.steps if s["status"] != "ok"]
    ok = sum(1 for s in dt.steps if s["status"] == "ok")
    lines.append(f"\nSteps: {ok} ok, {len(bad)} not"
                 + ("".join(f"\n- {s['part']} {s['name']}: {s['status']}" for s in bad)) + "\n")
    tests = gpu_tests_line(dt)
    if tests:
        lines.append(f"\nGPU test suite under mpirun: {tests}.\n")
    effs = []
    for label in dt.labels:
        run = dt.main_run(label)
        if run and max(run) > 1:
            r = run[max(run)]
            effs.append(f"{label} {pct(r.get('scaling_efficiency'))}")
    if effs:
        top = max(max(dt.main_run(label)) for label in dt.labels if dt.main_run(label))
        lines.append(f"\nScaling efficiency at {top} (graphs on, bucket 25): {', '.join(effs)}.\n")
    rows = ddp_rows(dt)
    if rows:
        lines.append(f"\nAgainst DDP: {sum(r['within'] for r in rows)} of {len(rows)} within ±{POINTS:g} points, "
                     f"{sum(r['explained'] for r in rows)} explained by exposed comm: "
                     + "; ".join(f"{r['label']} {r['delta']:+.1f}" for r in rows) + ".\n")
    ar = [r for r in dt.comm if r["op"] == "all_reduce" and r["world_size"] > 1 and r.get("rows")]
    if ar:
        lines.append("\nall_reduce busbw at the largest message: " + ", ".join(
            f"{r['world_size']} GPUs {num((r['rows'][-1].get('out_of_place') or {}).get('busbw_gbps'), 1)} GB/s"
            for r in sorted(ar, key=lambda r: r["world_size"])) + ".\n")
    if dt.faults:
        by_kind = {}
        for f in dt.faults:
            by_kind.setdefault(f["fault"], []).append(f)
        parts = []
        for kind, runs in by_kind.items():
            passed = sum(bool(f.get("passed")) for f in runs)
            ends = [f["seconds_to_end"] for f in runs if f.get("seconds_to_end") is not None]
            failed = sorted({k for f in runs for k, v in f.get("checks", {}).items() if not v})
            parts.append(f"{kind} rank {runs[0]['rank']} {passed} of {len(runs)} passed"
                         + (f", ended within {max(ends):.1f} s" if ends else "")
                         + (f" ({', '.join(failed)} failed)" if failed else ""))
        lines.append("\nFaults: " + "; ".join(parts) + ".\n")
    prow = [r for r in projection_rows(dt, "one-gpu") if r["n"] >= 2]
    if prow:
        lines.append(f"\nProjection from one GPU: {sum(r['ok'] for r in prow)} of {len(prow)} multi-GPU rows within "
                     f"{100 * STEP_ERROR:g}% step time and {POINTS:g} points.\n")
    lines.append("\nTables: scaling.md, ddp.md, comm.md, faults.md, projection.md; every record under details/.\n")
    return "".join(lines)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(os.path.join(sys.argv[1], "details")):
        raise SystemExit("usage: multi_gpu_tables.py OUTDIR (a folder with details/ from launch/multi_gpu_plan.sh)")
    outdir = sys.argv[1]
    dt = Details(outdir)
    for name, make in (("scaling", scaling_md), ("ddp", ddp_md), ("comm", comm_md), ("faults", faults_md),
                       ("projection", projection_md), ("summary", summary_md)):
        with open(os.path.join(outdir, f"{name}.md"), "w") as f:
            f.write(make(dt))
    print(open(os.path.join(outdir, "summary.md")).read(), end="")


if __name__ == "__main__":
    main()
