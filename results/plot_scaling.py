#!/usr/bin/python3
"""Scaling plots from scalebench JSONL records (results/SCHEMA.md).

  /usr/bin/python3 results/plot_scaling.py results/*.jsonl -o plots/

writes, as PNG and SVG:
  efficiency  scaling efficiency T(n) / (n T(1)) against GPU count, one line per system/config,
              the ideal at 100 %, each point with its spread over the steps where the record has one
  throughput  samples/s against GPU count, with each line's ideal n T(1) and each point's spread
  breakdown   compute / exposed tail / optimizer time of the median step, stacked, per GPU count,
              and the median step without communication beside the whole step (their gap is the
              comm cost; docs/measurement.md) (one panel per system/config; projected panels share
              one y-scale, as do measured ones)
  busbw       bus bandwidth (out-of-place, nccl-tests' busbw) against message size of each
              collective in `scalebench comm` records (only when the files hold some)
Measured records are drawn solid, projected ones (`"projected": true`) dashed (hatched bars).
Records of ranks sharing a GPU (`"shared_gpu": true`, `--share-gpu`) are left out with a
warning: they rehearse a multi-rank run and are not hardware figures. So are records of runs that
diverged (`loss_check.passed` false: the loss stopped being finite), one warning line per file.
A system is named from the environment record: the GPU name (environment.gpu.name, else the
backend) and the host of rank 0, or the Slurm partition when the run was a Slurm job (as
`scalebench report` names them). The same system and workload found in two files are two lines,
the file name added; --label FILE=NAME names a file's system instead (--label NAME: every
file's), and files given the same NAME are merged into one line (the files of a node sweep). Repeated measurements of one world
size in a line (several launches, the n = 1 run of each node-sweep job) are drawn as their median.

Needs matplotlib (Debian: python3-matplotlib, for /usr/bin/python3). Bad input is refused
with a one-line reason and exit 2: a missing file, a line that is not a valid record (not
UTF-8, not JSON, a needed field missing or of the wrong type; FILE:LINE named; with
--skip-bad-lines it is skipped with a warning instead), a file without any valid record, or
files without any train/comm record, a number outside its plausible range (a negative
throughput, a 300-digit time), or a file (under any spelling) or format given twice. An output it cannot write is refused before any file is read,
with one line and exit 2: a folder it cannot create or write in (-o), or a plot's file that
exists and is a folder or another non-regular file; a plot that still cannot be written (a
full disk) exits 1 naming the file, and leaves no partial file. A run whose start record has
no end record is named in a warning as cut short.
"""

import argparse
import io
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_input import (InputError, drawn_text, file_identity, number, optional_number,  # noqa: E402
                        quiet_matplotlib, read_input, refuse_repeats)

PROG = "plot_scaling.py"
PHASES = [("compute_ms", "compute (forward + backward)", "#4C72B0"),
          ("exposed_comm_ms", "exposed tail (end of backward to the last bucket)", "#DD8452"),
          ("optimizer_ms", "optimizer", "#55A868")]


# Bad input is tool_input's InputError: reported as one line, exit 2.
MAX_RECORD_FILE_BYTES = 512 << 20  # as scalebench's own record reader (src/core/files.h)


# --- reading ---------------------------------------------------------------------------

def bad_line(message, skip_bad_lines):
    """A line that is not a valid record: refused (exit 2), or skipped with a warning."""
    if not skip_bad_lines:
        raise InputError(message + " (--skip-bad-lines to skip it)")
    print(f"{PROG}: warning: {message}; skipped", file=sys.stderr)


def read_jsonl(path, skip_bad_lines, runs):
    """Yields (line_number, record) for each line holding a JSON object; any other non-blank
    line is a bad line. The start/end/incomplete records that bracket a run are collected in
    `runs` (run_id -> [start line, closed]) and not yielded."""
    data = read_input(path, "results file", MAX_RECORD_FILE_BYTES)  # never a FIFO, /dev/zero or an endless file
    for number, raw in enumerate(io.BytesIO(data), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except UnicodeDecodeError as e:
            bad_line(f"{path}:{number}: not UTF-8 text (byte {e.start + 1})", skip_bad_lines)
            continue
        except (ValueError, RecursionError) as e:
            torn = "" if raw.endswith(b"\n") else "torn last line, "
            bad_line(f"{path}:{number}: malformed record: {torn}{str(e)[:200]}", skip_bad_lines)
            continue
        kind, run_id = record.get("subcommand"), record.get("run_id")
        if kind in ("start", "end", "incomplete") and isinstance(run_id, str):
            if kind == "start":
                runs[run_id] = [f"{path}:{number}", record.get("run_subcommand"), False]
            elif run_id in runs:
                runs[run_id][2] = True
            if kind != "incomplete":
                continue
        yield number, record


def median_of(record, key, where):
    value = record.get(key)
    if not isinstance(value, dict):
        raise InputError(f"{where}: field '{key}' is {json.dumps(value)}, expected a summary with 'median'")
    return number(value, "median", f"{where}: {key}", field=key)


def mapping(record, key, where):
    """record[key] as a dict ({} when absent); anything else is not a valid record."""
    value = record.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: field '{key}' is {json.dumps(value)[:80]}, expected an object")
    return value


def system_name(record, label_override, where):
    if label_override:
        return label_override
    env = mapping(record, "environment", where)
    gpu = mapping(env, "gpu", f"{where}: environment")
    device = str(gpu.get("name") or record.get("backend") or "?")
    slurm = mapping(env, "slurm", f"{where}: environment")
    if slurm.get("SLURM_JOB_PARTITION"):
        where = f"Slurm partition {slurm['SLURM_JOB_PARTITION']}"
    else:
        hosts = env.get("hostnames")
        where = str(hosts[0]) if isinstance(hosts, list) and hosts else "?"
    return f"{device} ({where})"


def config_name(record, where):
    cfg = mapping(record, "config", where)
    source = os.path.splitext(os.path.basename(str(cfg.get("source", ""))))[0]
    model = source if source and not source.startswith("<") else record.get("model", "?")
    mode = record.get("scaling_mode", "?")
    batch = (f"batch {record.get('local_batch')}/rank" if mode == "weak"
             else f"global batch {record.get('global_batch')}")
    return f"{model}, {record.get('precision', '?')}, {mode}, {batch}"


class Series:
    """Records of one system and config, measured or projected, keyed by world size; `file` is
    the file they came from (None when --label merged several files under one name)."""

    def __init__(self, file, system, config, projected):
        self.file, self.system, self.config, self.projected = file, system, config, projected
        self.by_n = {}
        self.file_in_label = False

    @property
    def base(self):
        """What a colour stands for: a projection shares its measurement's colour."""
        return (self.system, self.config, self.file if self.file_in_label else None)

    @property
    def label(self):
        """As drawn: a `$` escaped, so a name from a record is text, never matplotlib's math."""
        where = f" [{os.path.basename(self.file)}]" if self.file_in_label else ""
        text = f"{self.system}{where}: {self.config}" + (" (projected)" if self.projected else "")
        return drawn_text(text)

    def sizes(self):
        return sorted(self.by_n)

    def value(self, n, key):
        values = [r[key] for r in self.by_n[n] if r.get(key) is not None]
        return statistics.median(values) if values else None

    def throughput_at_1(self):
        return self.value(1, "samples_per_s") if 1 in self.by_n else None

    def efficiency(self, n):
        """The records' own figure (against n = 1 of the same launch), else against this
        series' n = 1 (one launch per world size)."""
        own = self.value(n, "scaling_efficiency")
        if own is not None:
            return own
        t1 = self.throughput_at_1()
        return None if t1 is None else self.value(n, "samples_per_s") / (n * t1)


def load(paths, labels, skip_bad_lines):
    train, comm = {}, {}
    runs = {}
    shared_total = 0
    for path in paths:
        valid = 0
        shared = 0
        diverged = 0
        for line, r in read_jsonl(path, skip_bad_lines, runs):
            where = f"{path}:{line}"
            if r.get("shared_gpu") is True:
                shared += 1
                continue
            try:
                if diverged_run(r, where):
                    diverged += 1
                    continue
                add_record(r, where, path, labels, train, comm)
                valid += 1
            except InputError as e:
                bad_line(str(e), skip_bad_lines)
            except (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError, RecursionError) as e:
                bad_line(f"{where}: not a valid {r.get('subcommand')!s:.20} record: {type(e).__name__}: {str(e)[:200]}",
                         skip_bad_lines)
        if shared:
            print(f"{PROG}: warning: {path}: {shared} record(s) of ranks sharing a GPU (shared_gpu) left out: "
                  "not hardware figures", file=sys.stderr)
        if diverged:
            print(f"{PROG}: warning: {path}: {diverged} record(s) of runs that diverged (loss check failed: the loss "
                  "stopped being finite) left out: not throughput figures", file=sys.stderr)
        shared_total += shared + diverged
        if valid + shared + diverged == 0 and not any(start.startswith(f"{path}:") for start, _, _ in runs.values()):
            raise InputError(f"{path}: no valid record in the file")
    for start, kind, closed in runs.values():
        if not closed:
            print(f"{PROG}: warning: {start}: the {kind} run started here has no end record: it was cut short "
                  "(or is still running)", file=sys.stderr)
    if not train and not comm:
        only_shared = " (only records of ranks sharing a GPU or of diverged runs, which are not plotted)" \
            if shared_total else ""
        raise InputError(f"{', '.join(paths)}: no train or comm records to plot{only_shared}")
    for group in (train.values(), comm.values()):
        # The same system and workload in two files (NCCL_ALGO=Ring in one, Tree in the other)
        # are two lines, told apart by file name; --label merges files on purpose.
        names = {}
        for s in group:
            names.setdefault((s.system, s.config, s.projected), []).append(s)
        for same in names.values():
            if len(same) > 1:
                for s in same:
                    s.file_in_label = True
    return list(train.values()), list(comm.values())


def diverged_run(r, where):
    """Whether a record is of a run whose loss check failed (the loss stopped being finite: it
    diverged), whose throughput is not a figure of the hardware; records without the check are not."""
    if r.get("loss_check") is None:
        return False
    check = mapping(r, "loss_check", where)
    if not isinstance(check.get("passed"), bool):
        raise InputError(f"{where}: field 'loss_check.passed' is {json.dumps(check.get('passed'))[:40]}, expected true or false")
    return not check["passed"]


def add_record(r, where, path, labels, train, comm):
    """Adds one record to the train or comm series; InputError when it is not valid."""
    kind = r.get("subcommand")
    projected = r.get("projected") is True
    if kind == "train" or (kind == "project" and "samples_per_s" in r):
        n = number(r, "world_size", where)
        eff = r.get("scaling_efficiency")
        row = {
            "samples_per_s": number(r, "samples_per_s", where),
            "scaling_efficiency": None if eff is None else number(r, "scaling_efficiency", where),
            "step_ms": median_of(r, "step_ms", where),
            # The figures' spreads (half their p10..p90 range over the steps) and the median step
            # without communication at this n (DDP's no_sync; step - it = the comm cost).
            "samples_per_s_spread": optional_number(r, "samples_per_s_spread", where),
            "scaling_efficiency_spread": optional_number(r, "scaling_efficiency_spread", where),
            "no_comm_step_ms": None if r.get("no_comm_step_ms") is None else median_of(r, "no_comm_step_ms", where),
        }
        # The phases of one step, so the stack is that step: the record's median step (its
        # slowest rank's phases); projected records' phases add up by construction. Older
        # measured records hold only per-phase medians, which need not add up to the step.
        step = r.get("median_step")
        if step is not None:
            step = mapping(r, "median_step", where)
            row["step_ms"] = number(step, "step_ms", f"{where}: median_step")
            for key, _, _ in PHASES:
                row[key] = number(step, key, f"{where}: median_step")
        else:
            for key, _, _ in PHASES:
                row[key] = median_of(r, key, where)
        key = (None if path in labels else path, system_name(r, labels.get(path), where),
               config_name(r, where), projected)
        series = train.setdefault(key, Series(*key))
        series.by_n.setdefault(n, []).append(row)
    elif kind == "comm":
        # `scalebench comm` (src/commands/comm_command.cpp): one record per (world size, op, dtype,
        # redop), its sizes in `rows`: {size_bytes, out_of_place: {busbw_gbps, ...}, in_place}.
        n = number(r, "world_size", where)
        rows = r.get("rows")
        if not isinstance(rows, list) or not rows:
            raise InputError(f"{where}: comm record has no 'rows' (expected a list of sizes)")
        placement = None
        points = []
        for i, row in enumerate(rows):
            at = f"{where}: rows[{i}]"
            if not isinstance(row, dict):
                raise InputError(f"{at}: expected an object")
            # Out-of-place is nccl-tests' headline figure; in-place where only that ran.
            chosen = "out_of_place" if isinstance(row.get("out_of_place"), dict) else "in_place"
            if not isinstance(row.get(chosen), dict):
                raise InputError(f"{at}: neither 'out_of_place' nor 'in_place' was measured")
            placement = placement or chosen
            points.append((number(row, "size_bytes", at), number(row[chosen], "busbw_gbps", f"{at}.{chosen}")))
        op = r.get("op", "?")
        dtype = r.get("dtype", "?")
        redop = r.get("redop")
        what = f"{op} {dtype}" + (f" {redop}" if redop and redop != "none" else "")
        system = system_name(r, labels.get(path), where)
        backend = r.get("backend", "?")
        what += f", {n} ranks" + ("" if system.startswith(backend) else f", {backend}")
        what += ", in-place" if placement == "in_place" else ""
        key = (None if path in labels else path, system, what, projected)
        series = comm.setdefault(key, Series(*key))
        for size, busbw in points:
            series.by_n.setdefault(size, []).append({"busbw_gbps": busbw})


# --- drawing ----------------------------------------------------------------------------

def style_for(all_series):
    """One colour per system/config; measured solid, projected dashed."""
    import matplotlib.pyplot as plt
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    bases = []
    for s in all_series:
        if s.base not in bases:
            bases.append(s.base)
    return lambda s: {"color": colours[bases.index(s.base) % len(colours)],
                      "linestyle": "--" if s.projected else "-",
                      "marker": "o" if not s.projected else "s"}


def gpu_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(n) for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("GPUs n (MPI ranks; CPU ranks on the CPU backend)")
    if len(sizes) == 1:
        ax.set_xlim(sizes[0] / 1.5, sizes[0] * 1.5)


def legend(ax, fig, count):
    # Long system names: the legend goes under the axes once there are several lines.
    if count <= 3:
        ax.legend(fontsize="small", loc="best")
    else:
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)


class OutputError(Exception):
    """A plot that could not be written although its path was checked: one line, exit 1."""


PLOTS = ("efficiency", "throughput", "breakdown", "busbw")


def output_problem(outdir, prefix, formats):
    """Why the plots cannot go to outdir (None when they can), checked before any file is read
    and without creating anything: the folder, or the nearest existing folder above it, must be
    a folder this process can write in, and no plot's path may be a folder or special file."""
    folder = os.path.abspath(outdir)
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        return f"-o {outdir}: {folder} is not a folder"
    # A folder of this process's own, made and removed: whether files and folders can be made
    # there (what access() says for root on a read-only mount, or a full disk, is not enough).
    probe = os.path.join(folder, f".plot_scaling-check-{os.getpid()}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as e:
        verb = "write in" if folder == os.path.abspath(outdir) else "create folders in"
        return f"-o {outdir}: cannot {verb} {folder}: {e.strerror or e}"
    for name in PLOTS:
        for fmt in formats:
            path = os.path.join(outdir, f"{prefix}{name}.{fmt}")
            if os.path.lexists(path) and not os.path.isfile(path):
                return f"-o {outdir}: {path} exists and is not a regular file"
    return None


def save(fig, outdir, prefix, name, formats, written):
    for fmt in formats:
        path = os.path.join(outdir, f"{prefix}{name}.{fmt}")
        try:
            fig.savefig(path, dpi=150, bbox_inches="tight")
        except OSError as e:
            if os.path.isfile(path):
                os.remove(path)  # no partial plot left behind
            raise OutputError(f"{path}: cannot write the plot: {e.strerror or e}")
        written.append(path)


def plot_efficiency(plt, series, style, outdir, prefix, formats, written):
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    sizes = sorted({n for s in series for n in s.sizes()})
    ax.axhline(100, color="0.4", linestyle=":", linewidth=1.2, label="ideal (100 %)")
    drawn, top = 0, 110
    for s in series:
        points = [(n, s.efficiency(n)) for n in s.sizes()]
        points = [(n, 100 * e) for n, e in points if e is not None]
        if not points:
            print(f"{PROG}: note: {s.label}: no n = 1 record, so no efficiency to draw", file=sys.stderr)
            continue
        ax.plot(*zip(*points), label=s.label, **style(s))
        spreads = [(n, 100 * e, 100 * d) for n, e in points
                   if (d := s.value(n, "scaling_efficiency_spread")) is not None]
        if spreads:  # each point's spread over the measured steps
            ax.errorbar([n for n, _, _ in spreads], [e for _, e, _ in spreads], yerr=[d for _, _, d in spreads],
                        fmt="none", ecolor=style(s)["color"], capsize=3, linewidth=1)
        top = max(top, max(e for _, e in points) * 1.08)
        drawn += 1
    gpu_axis(ax, sizes)
    ax.set_ylim(0, top)
    ax.set_ylabel("scaling efficiency (%)")
    ax.set_title("Scaling efficiency T(n) / (n \u00b7 T(1)), samples/s")
    ax.grid(True, alpha=0.3)
    legend(ax, fig, drawn + 1)
    save(fig, outdir, prefix, "efficiency", formats, written)
    plt.close(fig)


def plot_throughput(plt, series, style, outdir, prefix, formats, written):
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    sizes = sorted({n for s in series for n in s.sizes()})
    from matplotlib.ticker import FuncFormatter, LogLocator
    ideal_drawn = False
    for s in series:
        ns = s.sizes()
        ax.plot(ns, [s.value(n, "samples_per_s") for n in ns], label=s.label, **style(s))
        spreads = [(n, s.value(n, "samples_per_s"), d) for n in ns if (d := s.value(n, "samples_per_s_spread")) is not None]
        if spreads:  # each point's spread over the measured steps
            ax.errorbar([n for n, _, _ in spreads], [v for _, v, _ in spreads], yerr=[d for _, _, d in spreads],
                        fmt="none", ecolor=style(s)["color"], capsize=3, linewidth=1)
        t1 = s.throughput_at_1()
        if t1 is not None and len(ns) > 1:
            ax.plot(ns, [n * t1 for n in ns], color=style(s)["color"], linestyle=":", linewidth=1.2)
            ideal_drawn = True
    gpu_axis(ax, sizes)
    ax.set_yscale("log")
    values = [v for s in series for n in s.sizes() if (v := s.value(n, "samples_per_s")) > 0]
    narrow = bool(values) and max(values) / min(values) < 20  # within about a decade: label more ticks
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9) if narrow else (1, 2, 5)))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs="auto"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: human_count(v)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_ylabel("throughput (samples/s, log scale)")
    ax.set_title("Training throughput against GPU count")
    ax.grid(True, which="major", alpha=0.3)
    if ideal_drawn:
        # One legend entry for all the ideal lines: each is drawn in its line's colour.
        ax.plot([], [], color="0.3", linestyle=":", linewidth=1.2, label="ideal n \u00b7 T(1) of the line of its colour")
    legend(ax, fig, len(series) + ideal_drawn)
    save(fig, outdir, prefix, "throughput", formats, written)
    plt.close(fig)


def plot_breakdown(plt, series, outdir, prefix, formats, written):
    import textwrap
    count = len(series)
    cols = min(count, 2)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.6 * rows), squeeze=False)
    # Projected panels share one y-scale (a 23 ms bar must look shorter than a 120 ms one), and
    # so do the measured ones.
    top = {}
    for s in series:
        tallest = max(max(s.value(n, "step_ms") or 0, sum(s.value(n, k) or 0 for k, _, _ in PHASES)) for n in s.sizes())
        top[s.projected] = max(top.get(s.projected, 0), tallest)
    for ax, s in zip(axes.flat, series):
        ns = s.sizes()
        x = list(range(len(ns)))
        bottom = [0.0] * len(ns)
        for key, name, colour in PHASES:
            heights = [s.value(n, key) for n in ns]
            ax.bar(x, heights, bottom=bottom, color=colour, label=name, width=0.6,
                   hatch="//" if s.projected else None, edgecolor="white" if not s.projected else "0.3")
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.plot(x, [s.value(n, "step_ms") for n in ns], linestyle="none", marker="_", markersize=28,
                color="black", label="whole step (median)")
        no_comm = [(i, v) for i, n in enumerate(ns) if (v := s.value(n, "no_comm_step_ms")) is not None]
        if no_comm:  # the gap from here to the whole step is the comm cost (docs/measurement.md)
            ax.plot([i for i, _ in no_comm], [v for _, v in no_comm], linestyle="none", marker="_", markersize=28,
                    color="0.45", label="step without communication (median)")
        ax.set_xticks(x)
        ax.set_xticklabels([str(n) for n in ns])
        ax.set_xlabel("GPUs n")
        ax.set_ylabel("time per step (ms, median step)")
        ax.set_ylim(0, top[s.projected] * 1.08)
        ax.set_title("\n".join(textwrap.wrap(s.label, 52)), fontsize="medium")
        ax.grid(True, axis="y", alpha=0.3)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=4, fontsize="small", bbox_to_anchor=(0.5, -0.02))
    fig.suptitle("Where a step's time goes: compute, exposed tail, optimizer (the median step); "
                 "comm cost = whole step - step without communication")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(fig, outdir, prefix, "breakdown", formats, written)
    plt.close(fig)


def human_count(v):
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:g}{suffix}"
    return f"{v:g}"


def human_bytes(b):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024 or unit == "GiB":
            return f"{b:g} {unit}"
        b /= 1024


def plot_busbw(plt, series, style, outdir, prefix, formats, written):
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    sizes = sorted({b for s in series for b in s.sizes()})
    for s in series:
        bs = s.sizes()
        ax.plot(bs, [s.value(b, "busbw_gbps") for b in bs], label=s.label, **style(s))
    ax.set_xscale("log", base=2)
    ticks = sizes if len(sizes) <= 12 else sizes[:: math.ceil(len(sizes) / 12)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([human_bytes(b) for b in ticks], rotation=45, ha="right")
    ax.minorticks_off()
    ax.set_xlabel("message size (bytes, as nccl-tests' size column)")
    ax.set_ylabel("bus bandwidth (GB/s, 10\u2079 bytes/s)")
    ax.set_title("Collective bus bandwidth against message size (nccl-tests' busbw)")
    ax.grid(True, alpha=0.3)
    legend(ax, fig, len(series))
    save(fig, outdir, prefix, "busbw", formats, written)
    plt.close(fig)


def main(argv):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("files", nargs="+", help="JSONL result files")
    parser.add_argument("-o", "--outdir", default="runs/plots", help="folder the plots go to (default: runs/plots)")
    parser.add_argument("--prefix", default="", help="file name prefix, e.g. 'h200-' gives h200-efficiency.png")
    parser.add_argument("--formats", default="png,svg", help="comma-separated (default: png,svg)")
    parser.add_argument("--label", action="append", default=[], metavar="[FILE=]NAME",
                        help="name the system of FILE's records NAME (repeatable); without FILE=, of "
                             "every file not named otherwise; files of one NAME are merged into one line")
    parser.add_argument("--skip-bad-lines", action="store_true",
                        help="skip malformed lines with a warning instead of refusing the file")
    args = parser.parse_args(argv)

    labels = {}
    for item in args.label:
        file, sep, name = item.partition("=")
        if sep and file in args.files:
            if not name:
                raise InputError(f"--label '{item}': empty NAME")
            labels[file] = name
        elif item.strip():
            # No FILE= prefix naming one of the files: the name of every file's system.
            for f in args.files:
                labels.setdefault(f, item)
        else:
            raise InputError(f"--label '{item}': expected NAME or FILE=NAME")
    refuse_repeats("files", args.files, file_identity)  # every record drawn once
    formats = [f for f in args.formats.split(",") if f]
    for f in formats:
        if f not in ("png", "svg", "pdf"):
            raise InputError(f"--formats: '{f}' is not png, svg or pdf")
    refuse_repeats("--formats", formats)
    problem = output_problem(args.outdir, args.prefix, formats)
    if problem:
        raise InputError(problem)

    train, comm = load(args.files, labels, args.skip_bad_lines)

    try:
        plt = quiet_matplotlib()
    except ImportError as e:
        print(f"{PROG}: error: matplotlib is missing ({e}); install python3-matplotlib and run with "
              "/usr/bin/python3", file=sys.stderr)
        return 1
    try:
        os.makedirs(args.outdir, exist_ok=True)
    except OSError as e:
        raise OutputError(f"-o {args.outdir}: cannot create the folder: {e.strerror or e}")
    # Measured before projected, so a projection is drawn over the measurement it predicts.
    order = lambda s: (s.system, s.config, s.file or "", s.projected)
    train.sort(key=order)
    comm.sort(key=order)
    written = []
    if train:
        style = style_for(train)
        plot_efficiency(plt, train, style, args.outdir, args.prefix, formats, written)
        plot_throughput(plt, train, style, args.outdir, args.prefix, formats, written)
        plot_breakdown(plt, train, args.outdir, args.prefix, formats, written)
    else:
        print(f"{PROG}: note: no train records: no efficiency, throughput or breakdown plots", file=sys.stderr)
    if comm:
        plot_busbw(plt, comm, style_for(comm), args.outdir, args.prefix, formats, written)
    else:
        print(f"{PROG}: note: no comm records: no busbw plot (run `scalebench comm` for one)", file=sys.stderr)
    try:
        for path in written:
            print(path)
        sys.stdout.flush()
    except OSError as e:  # stdout on a full disk: say so once, not in a traceback at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise OutputError(f"cannot write the standard output: {e.strerror or e}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except InputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(2)
    except OutputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(1)
