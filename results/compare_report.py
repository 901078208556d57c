#!/usr/bin/python3
"""The buyer's guide as Markdown with plots, from `scalebench compare --json` without --config.

  scalebench compare --hardware A,B,... --report guide.md
runs this script as its second step; by hand:
  scalebench compare --hardware A,B,... --json > guide.json
  /usr/bin/python3 results/compare_report.py guide.json guide.md

writes guide.md and, beside it, guide-plots/ (PNG), per workload of each scenario:
  <workload>-throughput.png  samples/s against GPUs, the band the profile's ranges give shaded
                             (with --nodes N, the N-node configurations dashed beside one node's)
  <workload>-efficiency.png  scaling efficiency against GPUs, the band likewise
  <workload>-per-cost.png    samples/s per $10k of the whole cost and per kW at the scenario's
                             configuration, as bars
The Markdown holds the summary table (scenario x workload x budget), the figures and reasons
behind each cell, the flips inside the bands, the node costs, the card tests (projected and
measured), per workload the samples/s by GPUs (with the sharding mode of each configuration where
a scenario chooses it), the assumptions and every profile number with its source.

Needs matplotlib (Debian: python3-matplotlib, for /usr/bin/python3). Bad input exits 2 with one
line and writes nothing: a file that is not a regular file (a FIFO, /dev/zero) or past 64 MiB, not
UTF-8 JSON, nested past Python's recursion limit, or not compare's JSON without --config (a key
missing or of the wrong type anywhere, a profile number the card row or node cost prints without
its source); a figure it would print or draw outside its plausible range or not finite (a negative
or 1e308 samples/s, an infinite GiB: each key's range is in results/record_ranges.json, read
through tool_input.py; see GUIDE_FIGURES); and an output it cannot write (OUT.md a folder, its
folder missing or read-only), checked before anything is drawn. A write that still fails (a full
disk, while drawing or after) exits 1 with one line, leaving no partial file. Every string of the
JSON is written into the Markdown escaped (a `|` or newline in a profile name cannot break a
table) and drawn as text (a `$` is never matplotlib's math), without matplotlib's warnings.
"""

import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_input import InputError, drawn_text, figures, markdown_cell, quiet_matplotlib, read_input  # noqa: E402

PROG = "compare_report.py"


def fail(message):
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(2)


MAX_GUIDE_BYTES = 64 << 20  # compare's JSON of every shipped profile is under 1 MiB


def escaped(node):
    """The JSON with every string (keys too) escaped for a Markdown table, once, at load."""
    if isinstance(node, str):
        return markdown_cell(node)
    if isinstance(node, list):
        return [escaped(x) for x in node]
    if isinstance(node, dict):
        return {markdown_cell(k): escaped(v) for k, v in node.items()}
    return node


def load(path):
    try:
        data = json.loads(read_input(path, "compare JSON", MAX_GUIDE_BYTES).decode("utf-8"))
    except InputError as e:
        fail(str(e))
    except UnicodeDecodeError as e:
        fail(f"{path}: not UTF-8 text (byte {e.start + 1})")
    except json.JSONDecodeError as e:
        fail(f"{path}:{e.lineno}: not JSON ({e.msg})")
    except RecursionError:
        fail(f"{path}: nested too deep to be compare's JSON")
    if not isinstance(data, dict):
        fail(f"{path}: not compare's JSON (a JSON object)")
    for key in ("scenarios", "workloads", "profiles", "cost_terms", "tie_within"):
        if key not in data:
            fail(f"{path}: key '{key}' missing (compare --json without --config writes it)")
    try:
        check_figures(data, path)
    except InputError as e:
        fail(str(e))
    return escaped(data)


# Which range of results/record_ranges.json (tool_input.RANGES) holds each figure the guide prints
# or draws, by its key (or parent.key) in compare's JSON; a list or dict under a key takes its
# key's range. Every other number must be finite. The profile's own numbers (`hardware`, echoed in
# the sources table) each take their key's range where the table has one, else the widest bounds
# of any profile number; the workloads' configs are not printed.
GUIDE_FIGURES = {
    "samples_per_s": "samples_per_s", "samples_per_s_band": "samples_per_s",
    "samples_per_s_without_compute_error": "samples_per_s",
    "samples_per_s_per_10k_usd": "samples_per_s_per_10k_usd",
    "samples_per_s_per_10k_usd_whole_cost": "samples_per_s_per_10k_usd",
    "samples_per_s_per_kw": "samples_per_s_per_kw", "scaling_efficiency": "scaling_efficiency",
    "speedup": "speedup", "exposed_comm_ms": "exposed_comm_ms", "allreduce_ms": "allreduce_ms",
    "allreduce_busbw_gbps": "allreduce_busbw_gbps", "gpus": "gpus", "nodes": "nodes",
    "memory_per_gpu_gib": "memory_gib", "memory_per_gpu_gb": "memory_gib", "memory_breakdown_gib": "memory_gib",
    "memory_headroom_gib": "memory_headroom_gib",
    "node_cost_usd": "usd", "node_cost_usd.gpus_per_node": "gpus_per_node",
    "cost_terms.years": "years", "cost_terms.usd_per_kwh": "usd_per_kwh", "tie_within": "tie_within",
    "figures.projected": "card_figure", "figures.measured": "card_figure",
    "card.memory_gib": "memory_gb", "card.memory_bandwidth_gbps": "mem_bw_gbps", "card.copy_gbps": "copy_gbps",
    "card.tdp_w": "tdp_w", "card.price_usd": "price_usd",
}
PROFILE_FIGURES = {f"{key}.{end}": key for key in ("price_usd", "tdp_w", "copy_gbps", "memory_gb")
                   for end in ("value", "lo", "hi")} | {"mem_bw_gbps": "mem_bw_gbps"}
# The profile numbers behind the card row and the node cost: each must be in `hardware` with its
# source, or the guide would print a figure whose sources row is missing.
SOURCED = (("gpu", "memory_gb"), ("gpu", "copy_gbps"), ("gpu", "tdp_w"), ("gpu", "price_usd"),
           ("node", "gpus_per_node"), ("node", "server_usd"), ("node", "host_power_w"))


def check_figures(data, path):
    """InputError naming the first figure outside its range, not finite, or missing its source."""
    figures(data, GUIDE_FIGURES, path, skip=("hardware", "config"))
    profiles = data["profiles"]
    if not isinstance(profiles, list):
        raise InputError(f"{path}: 'profiles' is not a list")
    for i, p in enumerate(profiles):
        hardware = p.get("hardware") if isinstance(p, dict) else None
        if not isinstance(hardware, dict):
            raise InputError(f"{path}: profiles[{i}].hardware missing or not an object")
        figures(hardware, PROFILE_FIGURES, f"{path}: profiles[{i}].hardware", field="profile_number")
        for section, key in SOURCED:
            entry = hardware.get(section, {}).get(key) if isinstance(hardware.get(section), dict) else None
            if not (isinstance(entry, dict) and "value" in entry and isinstance(entry.get("source"), str)):
                raise InputError(f"{path}: profiles[{i}].hardware.{section}.{key} missing or without its value "
                                 "and source (the guide prints it and its source)")


def output_problem(out_md, plot_dir):
    """Why OUT.md and its plots cannot be written (None when they can), before anything is drawn."""
    folder = os.path.dirname(os.path.abspath(out_md))
    if os.path.isdir(out_md) or (os.path.lexists(out_md) and not os.path.isfile(out_md)):
        return f"{out_md}: not a regular file"
    if not os.path.isdir(folder):
        return f"{out_md}: no folder {folder}"
    if os.path.lexists(plot_dir) and not os.path.isdir(plot_dir):
        return f"{out_md}: {plot_dir}, where its plots go, is not a folder"
    probe = os.path.join(folder, f".compare_report-check-{os.getpid()}")
    try:  # whether files can be made there (access() says yes for root on a read-only mount)
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as e:
        return f"{out_md}: cannot write in {folder}: {e.strerror or e}"
    return None


def sources(node, prefix=""):
    """Every (key, value, source) of a profile's JSON: numbers with their sources, ranges' ends too."""
    out = []
    if isinstance(node, dict):
        if "source" in node and "value" in node:
            value = node["value"]
            if "lo" in node:
                out.append((prefix, f"{value:g} [{node['lo']:g}-{node['hi']:g}]",
                            f"{node['source']}; low end: {node['lo_source']}; high end: {node['hi_source']}"))
            else:
                out.append((prefix, f"{value:g}" if isinstance(value, (int, float)) else str(value), node["source"]))
            return out
        for key, value in node.items():
            if key == "gemm":
                for g in value:
                    out.append((f"{prefix}.gemm {g['precision']} {g['m']}x{g['n']}x{g['k']}", f"{g['tflops']:g} TFLOP/s",
                                g["source"]))
            else:
                out += sources(value, f"{prefix}.{key}" if prefix else key)
    return out


def judged(profile, gpus_judged, nodes):
    """The configuration a scenario of gpus_judged GPUs judges: one node's entry, or (nodes > 1 and a
    multi-GPU scenario) the same GPUs per node on the N nodes."""
    index = [i for i, x in enumerate(profile["by_gpus"]) if x["gpus"] <= gpus_judged][-1]
    if gpus_judged > 1 and nodes > 1 and profile.get("on_nodes"):
        return profile["on_nodes"][index]
    return profile["by_gpus"][index]


def plot_workload(plt, workload, gpus_judged, nodes, plot_dir, slug):
    """Throughput and efficiency against GPUs with bands; per-cost and per-kW bars. Returns the file names."""
    files = []
    for kind in ("throughput", "efficiency"):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        ticks = set()
        for p in workload["profiles"]:
            color = None
            for entries, style, suffix in ((p["by_gpus"], "-", ""), (p.get("on_nodes", []), "--", f", {nodes} nodes")):
                if not entries:
                    continue
                g = [x["gpus"] for x in entries]
                ticks.update(g)
                # Each figure's band from its own ends (every corner projected whole, its efficiency
                # against its own one GPU), never a band divided by the central one-GPU figure.
                key, scale = ("samples_per_s", 1) if kind == "throughput" else ("scaling_efficiency", 100)
                y = [scale * x[key] for x in entries]
                lo = [scale * x["bands"][key][0] for x in entries]
                hi = [scale * x["bands"][key][1] for x in entries]
                line, = ax.plot(g, y, style, marker="o", color=color,
                                label=drawn_text(p["name"] + suffix + ("" if p["fits_memory"] else " (does not fit)")))
                color = line.get_color()
                ax.fill_between(g, lo, hi, color=color, alpha=0.2)
        ax.set_xscale("log", base=2)
        ticks = sorted(ticks | {1, 2, 4, 8})
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.set_xlabel("GPUs (one node)" if nodes == 1 else f"GPUs (one node; dashed: {nodes} nodes)")
        ax.set_ylabel("samples/s (projected)" if kind == "throughput" else "scaling efficiency, % (projected)")
        ax.set_title(drawn_text(f"{workload['workload']}: {kind}, band = the profiles' ranges"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        name = f"{slug}-{kind}.png"
        fig.tight_layout()
        fig.savefig(os.path.join(plot_dir, name), dpi=110)
        plt.close(fig)
        files.append(name)
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.6))
    names, per_cost, per_kw = [], [], []
    for p in workload["profiles"]:
        at = judged(p, gpus_judged, nodes)
        names.append(drawn_text(p["name"]))
        per_cost.append(at["samples_per_s_per_10k_usd_whole_cost"])
        per_kw.append(at["samples_per_s_per_kw"])
    for ax, values, label in ((axes[0], per_cost, "samples/s per $10k of the whole cost"),
                              (axes[1], per_kw, "samples/s per kW of node power (GPUs and host share)")):
        ax.barh(names, values, color="#4C72B0")
        ax.set_xlabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    on = f" per node on {nodes} nodes" if nodes > 1 and gpus_judged > 1 else ""
    fig.suptitle(drawn_text(f"{workload['workload']} at {gpus_judged} GPU{'s' if gpus_judged > 1 else ''}{on} (projected)"),
                 fontsize=9)
    fig.tight_layout()
    name = f"{slug}-per-cost.png"
    fig.savefig(os.path.join(plot_dir, name), dpi=110)
    plt.close(fig)
    files.append(name)
    return files


def main(argv):
    if len(argv) != 3:
        fail("usage: compare_report.py COMPARE.json OUT.md")
    out_md = argv[2]
    stem = os.path.splitext(os.path.basename(out_md))[0]
    plot_dir_name = f"{stem}-plots"
    plot_dir = os.path.join(os.path.dirname(out_md) or ".", plot_dir_name)
    problem = output_problem(out_md, plot_dir)
    if problem:
        fail(problem)
    data = load(argv[1])
    try:
        plt = quiet_matplotlib()
    except ImportError:
        fail("matplotlib is missing (Debian: apt-get install python3-matplotlib; run with /usr/bin/python3)")
    # Drawn into a folder of this run's own, moved into place only when the whole guide is made.
    staging = os.path.join(os.path.dirname(out_md) or ".", f".{plot_dir_name}-{os.getpid()}")
    try:
        os.makedirs(staging)
        md, plots = render(data, argv[1], plt, staging, plot_dir_name)
    except OSError as e:  # a plot that cannot be written (a full disk): exit 1, nothing left
        shutil.rmtree(staging, ignore_errors=True)
        print(f"{PROG}: error: cannot write the plots of {out_md}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ArithmeticError) as e:
        shutil.rmtree(staging, ignore_errors=True)
        fail(f"{argv[1]}: not compare's JSON without --config ({type(e).__name__}: {str(e)[:120]})")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    # The Markdown is written whole beside its place first (the write that can find the disk
    # full), then the plots and it are moved in; a failure takes back whatever was moved.
    tmp_md = out_md + f".tmp-{os.getpid()}"
    made_plot_dir = not os.path.isdir(plot_dir)
    moved = []
    try:
        with open(tmp_md, "w") as f:
            f.write("\n".join(md) + "\n")
        os.makedirs(plot_dir, exist_ok=True)
        for name in os.listdir(staging):
            os.replace(os.path.join(staging, name), os.path.join(plot_dir, name))
            moved.append(os.path.join(plot_dir, name))
        os.replace(tmp_md, out_md)
    except OSError as e:
        for leftover in [tmp_md] + moved:
            if os.path.exists(leftover):
                os.remove(leftover)
        if made_plot_dir:
            shutil.rmtree(plot_dir, ignore_errors=True)
        print(f"{PROG}: error: cannot write {out_md} or its plots: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"{PROG}: wrote {out_md} and {plots} plots under {plot_dir}")


def render(data, source, plt, plot_dir, plot_dir_name):
    """The guide's Markdown lines and the number of plots drawn into plot_dir."""
    workloads = {w["workload"]: w for w in data["workloads"]}
    terms = data["cost_terms"]
    names = [p["name"] for p in data["profiles"]]
    nodes = data.get("nodes", 1)
    md = [f"# Buyer's guide: {', '.join(names)}", "",
          "Projected by `scalebench compare` (docs/projection.md: the model, its validation), not measured, "
          "except the card tests' measured rows. *ample*: the most samples/s per node; *limited*: the most "
          "samples/s per $10k of the whole cost (GPUs, their share of the server, power at TDP over "
          f"{terms['years']:g} years at {terms['usd_per_kwh']:g} USD/kWh). A cell marked * changes winner when "
          "a ranged profile number moves to an end of its range (listed under the scenario). Ties: a profile ties "
          "with the best when each central score lies inside the other's band (or within "
          f"{100 * data['tie_within']:g}% of it), and a tie goes "
          "to the cheaper configuration, then to the one needing no patched driver. The bands a verdict and its "
          "flips judge by leave out the compute model's own error, which the cards compared largely share; a cell "
          "says where the winner's band with that error is wider than its lead."
          + (f" `--nodes {nodes}`: every multi-GPU scenario judges {nodes} nodes of each profile's node, the network "
             "between them the profile's." if nodes > 1 else ""), "",
          "## Summary", "", "| scenario | workload | ample budget | limited budget |", "| --- | --- | --- | --- |"]
    for sc in data["scenarios"]:
        by_workload = {}
        for c in sc["cells"]:
            by_workload.setdefault(c["workload"], {})[c["budget"]] = c
        for i, (w, cells) in enumerate(by_workload.items()):
            def name(c):
                return (c["winner"] or "none qualifies") + (" *" if c["flips"] else "")
            md.append(f"| {sc['scenario'] if i == 0 else ''} | {w} | {name(cells['ample'])} | {name(cells['limited'])} |")
    md += ["", "## Node cost", "", "| profile | GPUs | GPUs USD | server USD | power USD | total USD |",
           "| --- | --- | --- | --- | --- | --- |"]
    for p in data["profiles"]:
        c = p["node_cost_usd"]
        md.append(f"| {p['name']} | {c['gpus_per_node']} | {c['gpus']:.0f} | {c['server']:.0f} | {c['power']:.0f} | "
                  f"{c['total']:.0f} |")
    md += ["", "## Card tests (one GPU)", "",
           "Projected for every profile; *measured* where results/ holds the GPU's own records (the file named).", "",
           "| profile | test | projected | measured | unit | measured from |", "| --- | --- | --- | --- | --- | --- |"]
    for p in data["profiles"]:
        for f in p["card"]["figures"]:
            measured = f"{f['measured']:.2f}" if "measured" in f else "-"
            md.append(f"| {p['name']} | {f['test']} | {f['projected']:.2f} | {measured} | {f['unit']} | "
                      f"{f.get('measured_from', '-')} |")
        c = p["card"]
        md.append(f"| {p['name']} | memory, bandwidth, TDP, price | {c['memory_gib']:g} GiB, {c['memory_bandwidth_gbps']:g} GB/s "
                  f"(copy {c['copy_gbps']:g}), {c['tdp_w']:g} W, {c['price_usd']:g} USD | | | profile |")
    plots = 0
    drawn = {}
    for sc in data["scenarios"]:
        sc_nodes = sc.get("nodes", 1)
        md += ["", f"## {sc['scenario']}", "",
               f"Judged at {sc['gpus']} GPU{'s' if sc['gpus'] > 1 else ''}"
               + (f" per node on {sc_nodes} nodes" if sc_nodes > 1 else "") + " (or the node's largest below)"
               + (f"; requires {', '.join(sc['requires'])}" if sc["requires"] else "") + f"; preset `{sc['preset']}`.", ""]
        if "soak" in sc["requires"]:  # the soaks the cells judge, and the latest one's telemetry
            for p in data["profiles"]:
                latest = f"; the latest: {p['soak']}" if "soak" in p else ""
                md.append(f"- {p['name']}: soak {p['soak_verdict']['said']}{latest}")
            md.append("")
        for c in sc["cells"]:
            md.append(f"- **{c['workload']}, {c['budget']}**: {c['winner'] or 'none qualifies'}: {c['reason']}")
            for f in c["flips"]:
                md.append(f"  - flips inside the band: {f}")
        for w in dict.fromkeys(c["workload"] for c in sc["cells"]):
            if w not in workloads:
                raise KeyError(f"scenario '{sc['scenario']}' names workload '{w}', which 'workloads' lacks")
            key = (w, sc["gpus"], sc_nodes)
            if key not in drawn:
                slug = re.sub(r"[^A-Za-z0-9._-]", "-", w) + f"-{int(sc['gpus'])}gpu" + \
                    (f"-{int(sc_nodes)}nodes" if sc_nodes > 1 else "")
                drawn[key] = plot_workload(plt, workloads[w], sc["gpus"], sc_nodes, plot_dir, slug)
                plots += len(drawn[key])
            md.append("")
            for f in drawn[key]:
                md.append(f"![{w}: {f}]({plot_dir_name}/{f})")
    md += ["", "## Per workload: samples/s by GPUs, band, memory", ""]
    def figure(x):
        return f"{x['samples_per_s']:.1f} [{x['samples_per_s_band'][0]:.1f}-{x['samples_per_s_band'][1]:.1f}]"
    for w in data["workloads"]:
        # A workload that is sharded, or whose configurations chose among sharding modes: each cell
        # names the mode it runs in and whether it fits.
        modes = any("sharding_fit" in x or x.get("sharding", "none") != "none" for p in w["profiles"] for x in p["by_gpus"])
        def cell(x):
            if not modes:
                return figure(x)
            return f"{figure(x)} {x['sharding']}" + ("" if x["fits_memory"] else ", does not fit") + \
                f" ({x['memory_per_gpu_gib']:.2f} GiB)"
        across = f" | {nodes} nodes | efficiency on {nodes} nodes" if nodes > 1 else ""
        md += [f"### {w['workload']}", "", "| profile | 1 GPU | 2 GPUs | 4 GPUs | 8 GPUs | efficiency at 8 | exposed comm ms"
               f"{across} | GiB per GPU (headroom) | fits |",
               "| --- | --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if nodes > 1 else "") + " --- | --- |"]
        for p in w["profiles"]:
            cells = {x["gpus"]: cell(x) for x in p["by_gpus"]}
            top = p["by_gpus"][-1]
            on_nodes = ""
            if nodes > 1:
                full = p["on_nodes"][-1]
                on_nodes = f" | {full['gpus']} GPUs: {figure(full)} | {100 * full['scaling_efficiency']:.1f}%"
            md.append(f"| {p['name']} | " + " | ".join(cells.get(g, "-") for g in (1, 2, 4, 8)) +
                      f" | {100 * top['scaling_efficiency']:.1f}% | {top['exposed_comm_ms']:.2f}{on_nodes} | "
                      f"{p['memory_per_gpu_gib']:.2f} ({p['memory_headroom_gib']:.2f}) | {'yes' if p['fits_memory'] else 'NO'} |")
        if modes:
            md += ["", "Each cell: samples/s [band], the sharding mode the configuration runs in (the first of the "
                   "scenario's modes that fits the GPU) and its GiB per GPU; the memory and fit columns are at the most "
                   "GPUs (docs/sharding.md)."]
        md.append("")
    md += ["## Assumptions", "",
           f"- Power: the GPUs at TDP and the host at `node.host_power_w` around the clock for {terms['years']:g} years at "
           f"{terms['usd_per_kwh']:g} USD/kWh (`--years`, `--usd-per-kwh`): an upper bound of the energy bill.",
           "- The server's cost is shared per GPU slot (`node.server_usd` / GPUs per node).",
           "- Prices are the profiles' planning figures, not quotes.",
           "- The projection's own assumptions: docs/projection.md (Assumptions).", "",
           "## Sources: every profile number", ""]
    for p in data["profiles"]:
        md += [f"### {p['name']}", "", "| key | value | source |", "| --- | --- | --- |"]
        for key, value, source in sources(p["hardware"]):
            md.append(f"| {key} | {value} | {source} |")
        md.append("")
    return md, plots


if __name__ == "__main__":
    main(sys.argv)
