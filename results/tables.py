#!/usr/bin/env python3
"""Writes the figure tables of README.md and docs/*.md from the records committed under results/.

A table sits in a Markdown file between two markers:

    <!-- table:NAME -->
    ...generated...
    <!-- /table -->

    results/tables.py            regenerate every table in place
    results/tables.py --check    exit 1 when a committed table differs from what the records give, a
                                 marker names no table, a record a table reads is missing, or a folder
                                 of results/ with records has no README.md (its provenance)

Every figure links to the record it comes from (the JSONL line, or the file the reference tool wrote).
Standard library only: runs under python3 and /usr/bin/python3.
"""

import argparse
import glob
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!-- table:([A-Za-z0-9_-]+) -->$")
END_MARKER = "<!-- /table -->"


class TableError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Reading records

_cache = {}


def _read(path):
    full = os.path.join(ROOT, path)
    if not os.path.isfile(full):
        raise TableError(f"record file {path} does not exist")
    if path not in _cache:
        with open(full, encoding="utf-8") as f:
            _cache[path] = f.read()
    return _cache[path]


def _field(record, dotted):
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def record(path, **match):
    """The one record of a JSONL file whose fields (dotted names, '__' for '.') equal match: (line, record)."""
    found = []
    for number, line in enumerate(_read(path).splitlines(), start=1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if all(_field(rec, key.replace("__", ".")) == want for key, want in match.items()):
            found.append((number, rec))
    if len(found) != 1:
        raise TableError(f"{path}: {len(found)} records match {match}, expected exactly one")
    return found[0]


def json_file(path):
    return json.loads(_read(path))


def text_rows(path, first_column):
    """Rows of a whitespace-aligned table printed by a reference tool: {first cell: [cells]}."""
    rows = {}
    for line in _read(path).splitlines():
        cells = line.split()
        if cells and not line.startswith("#"):
            rows.setdefault(cells[first_column], []).append(cells)
    return rows


# ---------------------------------------------------------------------------------------------
# Cells


class Fig:
    """A figure and where it comes from: rendered as a link to the record (and its line)."""

    def __init__(self, text, path, line=None):
        self.text, self.path, self.line = text, path, line

    def render(self, doc_dir):
        target = os.path.relpath(os.path.join(ROOT, self.path), doc_dir)
        anchor = f"#L{self.line}" if self.line else ""
        return f"[{self.text}]({target}{anchor})"


def fmt(value, digits=1, thousands=True):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}" if thousands else f"{value:.{digits}f}"


def pct(fraction, digits=1):
    return "-" if fraction is None else f"{100 * fraction:.{digits}f}%"


def ratio(a, b):
    return f"{a / b:.2f}x"


# ---------------------------------------------------------------------------------------------
# The tables. Each returns (header, alignment, rows) or, for a quoted output, ("excerpt", path, lines).

# Folders of evidence folders, each with an index README.md: the kernels' history (one folder per tree),
# the other one-GPU measurements, the reliability runs.
GROUPS = ("h200-kernel-history", "h200-one-gpu", "h200-reliability")
H200 = "results/h200-kernel-history/resnet"
GEMM = "results/h200-one-gpu/gemm/gemm.jsonl"
GEMM_TORCH = "results/h200-one-gpu/gemm/gemm_vs_torch.txt"
BERT = f"{H200}/bert"
COMM_CMP = "results/h200-reliability/comm-stress/comm_{op}_compare.txt"
CPU = "results/cpu-2rank-vm"
FUSED = "results/h200-kernel-history/fused"
CUDNN = "results/h200-kernel-history/cudnn"
EPILOGUES = "results/h200-kernel-history/epilogues"
SIDE = "results/h200-kernel-history/decoder-bias"
LARGE = "results/h200-kernel-history/large-presets"
FINAL = "results/h200-kernel-history/fixed-pass"
POOLS = "results/h200-kernel-history/pool-backward"
MAXPOOL = "results/h200-kernel-history/maxpool-registers"
STEP = "results/h200-kernel-history/layernorm-gelu"
TUNE = "results/h200-kernel-history/gemm-algorithms"
CLOSING = "results/h200-one-gpu/step-vs-pytorch"

# The transformer runs beside PyTorch: (folder of launch/bench_transformer.sh's output, preset, batch).
# The folder holds scalebench_<preset>_b<batch>.jsonl and torch.jsonl.
TRANSFORMER_RUNS = [
    (f"{CLOSING}/bench", "bert-base", 32),
    (f"{CLOSING}/bench", "bert-base", 256),
    (f"{CLOSING}/bench", "bert-large", 32),
    (f"{CLOSING}/bench", "bert-large", 256),
    (f"{CLOSING}/bench", "gpt2-small", 8),
    (f"{CLOSING}/bench", "gpt2-medium", 8),
]


def _gemm(dtype):
    line, rec = record(GEMM, dtype=dtype)
    torch = text_rows(GEMM_TORCH, -9)[dtype][0]  # columns from the right: the GPU's name has spaces
    size = f"{rec['m']}³" if rec["m"] == rec["n"] == rec["k"] else f"{rec['m']}x{rec['n']}x{rec['k']}"
    return line, rec, float(torch[-2]), size


def _comm_compare(op):
    """A comm_<op>_compare.txt: {placement: {size: (sb us, nt us, sb algbw, nt algbw)}}."""
    path = COMM_CMP.format(op=op)
    rows = {"out": {}, "in": {}}
    for placement in rows:
        for cells in text_rows(path, 1).get(placement, []):
            rows[placement][int(cells[0])] = tuple(float(c) for c in cells[2:4] + cells[5:7])
    return path, rows


def _transformer_run(folder, preset, batch):
    """scalebench's record of a preset and batch and PyTorch's, by mode: (path, line, record, {mode: (line, record)})."""
    path = f"{folder}/scalebench_{preset}_b{batch}.jsonl"
    line, sb = record(path, world_size=1, config__source=f"configs/{preset}.yaml", config__batch_size=batch)
    torch_path = f"{folder}/torch.jsonl"
    peers = {}
    for mode in ("eager", "compile"):
        try:
            peers[mode] = record(torch_path, model=preset, batch=batch, mode=mode)
        except TableError:  # a mode not run at this batch
            pass
    return path, line, sb, peers


def _resnet_run(folder, model, batch, engine):
    """scalebench's record of a ResNet on one convolution engine: (path, line, record)."""
    path = f"{folder}/scalebench_{model}_{engine}_b{batch}.jsonl"
    line, r = record(path, world_size=1, conv_engine=engine)
    return path, line, r


def table_quickstart():
    """The columns train prints (src/commands/scaling_table.cpp), from the built-in default's records."""
    header = ["ranks", "samples/s", "per rank", "step ms", "± %", "compute ms", "tail ms", "optimizer ms",
              "no-comm step ms", "comm cost ms", "±", "hidden", "bwd slow ms", "busbw GB/s", "±", "eff.", "±"]
    rows = []
    for n in (1, 2):
        path = f"{CPU}/train.jsonl"
        line, r = record(path, world_size=n, config__source="<built-in default>")
        no_comm = r.get("no_comm_step_ms") or {}
        step = r["step_ms"]["median"]
        cells = [fmt(r["samples_per_s"]), fmt(r["samples_per_s_per_rank"]), fmt(step, 3),
                 fmt(100 * r["step_spread_ms"] / step), fmt(r["compute_ms"]["median"], 3),
                 fmt(r["exposed_comm_ms"]["median"], 3), fmt(r["optimizer_ms"]["median"], 3),
                 fmt(no_comm.get("median"), 3), fmt(r["comm_cost_ms"], 3), fmt(r["comm_cost_spread_ms"], 3),
                 pct(r["hidden_fraction"]), fmt(r["compute_slowdown_ms"], 3), fmt(r["allreduce_busbw_gbps"], 2),
                 fmt(r["allreduce_busbw_spread_gbps"], 2), pct(r["scaling_efficiency"]),
                 pct(r["scaling_efficiency_spread"])]
        rows.append([str(n)] + [Fig(c, path, line) for c in cells])
    return header, "r" * len(header), rows


def table_headline():
    header = ["figure (one H200)", "scalebench", "peer", "peer's figure", "scalebench / peer"]
    rows = []
    for dtype in ("fp16", "bf16", "tf32", "fp32"):
        line, rec, torch_tflops, size = _gemm(dtype)
        rows.append([f"GEMM {dtype} {size}, TFLOP/s", Fig(fmt(rec["tflops"]), GEMM, line), "`torch.mm`",
                     Fig(fmt(torch_tflops), GEMM_TORCH), ratio(rec["tflops"], torch_tflops)])
    names = {"bert-base": "BERT-base", "gpt2-small": "GPT-2 small"}  # the presets the headline shows
    for folder, preset, batch in TRANSFORMER_RUNS:
        if preset not in names:
            continue
        path, line, sb, peers = _transformer_run(folder, preset, batch)
        for mode, (tline, torch) in peers.items():
            rows.append([f"{names[preset]} training, batch {batch}, bf16, samples/s", Fig(fmt(sb["samples_per_s"], 0), path, line),
                         "Hugging Face, " + ("eager" if mode == "eager" else "`torch.compile`"),
                         Fig(fmt(torch["samples_per_s"], 0), f"{folder}/torch.jsonl", tline),
                         ratio(sb["samples_per_s"], torch["samples_per_s"])])
    path, line, sb = _resnet_run(f"{CLOSING}/bench_resnet", "resnet50", 256, "cudnn")
    torch_path = f"{CLOSING}/bench_resnet/torch.jsonl"
    for mode in ("eager", "compile"):
        tline, torch = record(torch_path, model="resnet50", mode=mode, batch=256)
        rows.append(["ResNet-50 training, batch 256, bf16, images/s (cuDNN engine)", Fig(fmt(sb["samples_per_s"], 0), path, line),
                     "torchvision + cuDNN, " + ("eager" if mode == "eager" else "`torch.compile`"),
                     Fig(fmt(torch["samples_per_s"], 0), torch_path, tline),
                     ratio(sb["samples_per_s"], torch["samples_per_s"])])
    cmp_path, comm = _comm_compare("all_reduce")
    sb_bw, nt_bw = comm["out"][256 << 20][2:]
    rows.append(["all_reduce 256 MiB, algbw GB/s (one GPU: NCCL's copy)", Fig(fmt(sb_bw), cmp_path), "nccl-tests 2.19.6",
                 Fig(fmt(nt_bw), cmp_path), ratio(sb_bw, nt_bw)])
    return header, "lrlrr", rows


def table_gemm_vs_torch():
    header = ["dtype", "size", "scalebench TFLOP/s", "of datasheet peak", "`torch.mm` TFLOP/s", "ratio"]
    rows = []
    for dtype in ("fp16", "bf16", "fp32", "tf32"):
        line, rec, torch_tflops, size = _gemm(dtype)
        rows.append([dtype, size, Fig(fmt(rec["tflops"]), GEMM, line), Fig(pct(rec["fraction_of_peak"]), GEMM, line),
                     Fig(fmt(torch_tflops), GEMM_TORCH), f"{rec['tflops'] / torch_tflops:.3f}"])
    return header, "llrrrr", rows


def table_mlp_large_step():
    path = "results/h200-one-gpu/gemm/mlp-large.jsonl"
    line, r = record(path, world_size=1)
    f = lambda text: Fig(text, path, line)  # noqa: E731
    step = r["step_ms"]
    gemm_tflops = r["model_flops_per_step"] / (r["compute_ms"]["median"] / 1000) / 1e12
    adam_bytes = 30 * r["num_params"]
    rows = [
        ["samples/s", f(fmt(r["samples_per_s"], 0))],
        ["step ms: median, min, max", f(f"{step['median']:.3f}, {step['min']:.3f}, {step['max']:.3f} "
                                         f"over {step['count']} steps")],
        ["compute ms (forward + backward)", f(f"{r['compute_ms']['median']:.2f}: "
                                               f"{r['model_flops_per_step'] / 1e12:.2f} TFLOP at {gemm_tflops:.0f} TFLOP/s")],
        ["optimizer ms (AdamW, 30 bytes per parameter)", f(f"{r['optimizer_ms']['median']:.2f}: "
                                                          f"{adam_bytes / 1e9:.1f} GB at "
                                                          f"{adam_bytes / (r['optimizer_ms']['median'] / 1000) / 1e12:.1f} TB/s")],
        ["exposed communication ms", f(f"{r['exposed_comm_ms']['median']:.2f} ({r['buckets']} buckets, "
                                        f"{r['gradient_bytes'] / 1e9:.2f} GB)")],
        ["MFU", f(f"{pct(r['mfu'])} of {r['peak_tflops_per_gpu']:.1f} TFLOP/s")],
        ["GPU busy / host overhead ms", f(f"{pct(r['gpu_busy_fraction'])} / {r['host_overhead_ms']:.3f}")],
    ]
    return ["figure", "value"], "lr", rows


def table_cuda_graphs():
    path = "results/h200-one-gpu/cuda-graphs/graphs.jsonl"
    header = ["workload", "CUDA graphs", "step ms (median)", "samples/s", "host overhead ms", "GPU busy"]
    rows = []
    for params, name in ((665104, "default MLP (665 k parameters, fp32, batch 128)"),
                         (545326080, "`mlp-large` (545 M, bf16, batch 1024)")):
        for graphs in (False, True):
            line, r = record(path, num_params=params, cuda_graphs=graphs)
            rows.append([name, "on" if graphs else "off", Fig(fmt(r["step_ms"]["median"], 3), path, line),
                         Fig(fmt(r["samples_per_s"], 0), path, line), Fig(fmt(r["host_overhead_ms"], 3), path, line),
                         Fig(pct(r["gpu_busy_fraction"]), path, line)])
    return header, "llrrrr", rows


def table_transformer_vs_torch():
    header = ["model", "seq", "batch", "scalebench samples/s", "MFU", "torch eager", "`torch.compile`", "vs eager", "vs compile"]
    rows = []
    for folder, preset, batch in TRANSFORMER_RUNS:
        path, line, sb, peers = _transformer_run(folder, preset, batch)
        cells = [preset, str(sb["config"]["transformer"]["seq_len"]), str(batch),
                 Fig(fmt(sb["samples_per_s"], 0), path, line), Fig(pct(sb["mfu"]), path, line)]
        for mode in ("eager", "compile"):
            cells.append(Fig(fmt(peers[mode][1]["samples_per_s"], 0), f"{folder}/torch.jsonl", peers[mode][0])
                         if mode in peers else "-")
        for mode in ("eager", "compile"):
            cells.append(ratio(sb["samples_per_s"], peers[mode][1]["samples_per_s"]) if mode in peers else "-")
        rows.append(cells)
    return header, "lrrrrrrrr", rows


def table_resnet50_precisions():
    header = ["precision (im2col engine, BatchNorm unfused)", "step ms (median)", "images/s",
              "loss over 40 steps from the same start"]
    rows = []
    for precision, step_file in (("bf16", f"{H200}/resnet50_b256_final.jsonl"), ("fp16", f"{H200}/final/resnet50_fp16_b256.jsonl")):
        line, r = record(step_file, world_size=1)
        loss_path = f"{H200}/final/resnet50_{precision}_40steps.jsonl"
        lline, l40 = record(loss_path, world_size=1)
        rows.append([precision, Fig(fmt(r["step_ms"]["median"], 2), step_file, line), Fig(fmt(r["samples_per_s"], 0), step_file, line),
                     Fig(f"{l40['initial_loss']:.2f} -> {l40['final_loss']:.2f}", loss_path, lline)])
    return header, "lrrr", rows


# Where each ResNet's runs beside PyTorch are: {model: (folder of PyTorch's runs, {engine: folder of scalebench's})}.
RESNET_RUNS = {
    "resnet50": (f"{CLOSING}/bench_resnet", {"cudnn": f"{CLOSING}/bench_resnet", "im2col": f"{CLOSING}/bench_resnet"}),
    "resnet152": (f"{SIDE}/bench_resnet", {"cudnn": f"{SIDE}/bench_resnet", "im2col": CUDNN}),
}


def table_resnet_engines_vs_torch():
    header = ["model", "batch", "conv engine", "step ms", "images/s", "MFU", "vs torch eager", "vs `torch.compile`"]
    rows = []
    for model, batch in (("resnet50", 256), ("resnet152", 128)):
        torch_folder, engines = RESNET_RUNS[model]
        torch_path = f"{torch_folder}/torch.jsonl"
        for engine in ("cudnn", "im2col"):
            path, line, r = _resnet_run(engines[engine], model, batch, engine)
            row = [model, str(batch), engine, Fig(fmt(r["step_ms"]["median"], 2), path, line),
                   Fig(fmt(r["samples_per_s"], 0), path, line), Fig(pct(r["mfu"]), path, line)]
            for mode in ("eager", "compile"):
                _, t = record(torch_path, model=model, mode=mode, batch=batch)
                row.append(ratio(r["samples_per_s"], t["samples_per_s"]))
            rows.append(row)
        for mode, name in (("eager", "PyTorch eager"), ("compile", "PyTorch `torch.compile`")):
            tline, t = record(torch_path, model=model, mode=mode, batch=batch)
            rows.append([model, str(batch), name, Fig(fmt(t["step_ms_median"], 2), torch_path, tline),
                         Fig(fmt(t["samples_per_s"], 0), torch_path, tline), "", "", ""])
    return header, "lrlrrrrr", rows


def table_resnet_memory_passes():
    """The ResNet's memory-bound passes around the stem, per call, from ResNet-50's op profiles (batch 256,
    bf16): the stem's im2col from the im2col engine's, the max pool from the current tree's cuDNN-engine
    profile; time and the bytes of the op's byte model over it."""
    im2col = f"{POOLS}/check/opprof_opprof_resnet50_im2col_b256.jsonl"
    pools = f"{STEP}/check/opprof_resnet50_cudnn_b256.jsonl"
    profiles = {im2col: _op_profile(im2col, "resnet50", 256, "/root/out/check/resnet50_im2col.yaml"),
                pools: _op_profile(pools, "resnet50", 256)}
    header = ["op", "shape", "ms per call", "MB moved", "TB/s"]
    rows = []
    for path, kind, variant in ((im2col, "im2col", "7x7/2 pad 3"), (pools, "maxpool_forward", "3x3/2 pad 1"),
                                (pools, "maxpool_backward", "3x3/2 pad 1")):
        (line, r), = [(n, r) for n, r in profiles[path] if r["op"]["kind"] == kind and r["op"]["variant"] == variant]
        rows.append([f"`{kind}` {variant}", f"{r['op']['m']:,} x {r['op']['n']:,}", Fig(fmt(r["ms"]["median"], 3), path, line),
                     Fig(fmt(r["op"]["bytes"] / 1e6, 0), path, line), Fig(fmt(r["achieved_gbps"] / 1000, 2), path, line)])
    return header, "llrrr", rows


def table_resnet_im2col_cost():
    """What the im2col engine spends on patch matrices per ResNet-50 step (batch 256, bf16), by convolution,
    from its op profile: the work the cuDNN engine does not do."""
    path = f"{POOLS}/check/opprof_opprof_resnet50_im2col_b256.jsonl"
    ops = [(n, r) for n, r in _op_profile(path, "resnet50", 256, "/root/out/check/resnet50_im2col.yaml")
           if r["op"]["kind"] in ("im2col", "col2im")]
    convolutions = [("7x7/2 pad 3", "the stem, 7x7 stride 2 on 3 channels"), ("3x3/1 pad 1", "3x3, stride 1"),
                    ("3x3/2 pad 1", "3x3, stride 2"), ("1x1/2 pad 0", "1x1 downsample, stride 2")]
    header = ["convolutions", "patch matrix: rows x columns", "im2col ms per step", "col2im ms per step", "both"]
    rows, total = [], 0.0
    for variant, name in convolutions:
        mine = [(n, r) for n, r in ops if r["op"]["variant"] == variant]
        if not mine:
            raise TableError(f"{path}: no im2col or col2im op of {variant}")
        shapes = sorted({(r["op"]["m"], r["op"]["n"]) for _, r in mine}, reverse=True)
        ms = {kind: sum(r["ms_per_step"] for _, r in mine if r["op"]["kind"] == kind) for kind in ("im2col", "col2im")}
        total += sum(ms.values())
        rows.append([name, ", ".join(f"{m:,} x {c:,}" for m, c in shapes)]
                    + [Fig(fmt(v, 2), path) if v else "-" for v in ms.values()] + [Fig(fmt(sum(ms.values()), 2), path)])
    rows.append(["every convolution the engine runs", "", "", "", Fig(fmt(total, 2), path)])
    return header, "llrrr", rows


TORCH_CHECKS = [
    ("bert-base", f"{H200}/torch_check_bert-base_fp32.json"),
    ("bert-base", f"{H200}/torch_check_bert-base_bf16.json"),
    ("bert-base", f"{FUSED}/check/torch_check_bert-base_bf16.json"),
    ("bert-base", f"{EPILOGUES}/check/torch_check_bert-base_bf16.json"),
    ("bert-base", f"{SIDE}/check/torch_check_bert-base_bf16.json"),
    ("bert-base", f"{LARGE}/check/torch_check_bert-base_fp32.json"),
    ("bert-base", f"{FINAL}/check/torch_check_bert-base_bf16.json"),
    ("bert-base", f"{STEP}/check/torch_check_bert-base_bf16.json"),
    ("bert-base", f"{CLOSING}/check/torch_check_bert-base_fp32.json"),
    ("bert-base", f"{CLOSING}/check/torch_check_bert-base_bf16.json"),
    ("gpt2-small", "results/h200-reliability/nccl-stall-opprof/torch_check_gpt2-small_fp32.json"),
    ("gpt2-small", "results/h200-reliability/nccl-stall-opprof/torch_check_gpt2-small_bf16.json"),
    ("gpt2-small", f"{FUSED}/check/torch_check_gpt2-small_bf16.json"),
    ("gpt2-small", f"{EPILOGUES}/check/torch_check_gpt2-small_bf16.json"),
    ("gpt2-small", f"{LARGE}/check/torch_check_gpt2-small_fp32.json"),
    ("gpt2-small", f"{FINAL}/check/torch_check_gpt2-small_bf16.json"),
    ("gpt2-small", f"{STEP}/check/torch_check_gpt2-small_bf16.json"),
    ("gpt2-small", f"{CLOSING}/check/torch_check_gpt2-small_fp32.json"),
    ("gpt2-small", f"{CLOSING}/check/torch_check_gpt2-small_bf16.json"),
    ("resnet50", f"{H200}/torch_check_resnet50_fp32.json"),
    ("resnet50", f"{H200}/torch_check_resnet50_cpu_fp32.json"),
    ("resnet50", f"{H200}/torch_check_resnet50_bf16.json"),
    ("resnet50", f"{H200}/torch_check_resnet50_fp16.json"),
    ("resnet50", f"{EPILOGUES}/check/torch_check_resnet50_fp32.json"),
    ("resnet50", f"{EPILOGUES}/check/torch_check_resnet50_bf16.json"),
    ("resnet50", f"{EPILOGUES}/check/torch_check_resnet50_fp16.json"),
    ("resnet50", f"{STEP}/check/torch_check_resnet50_bf16.json"),
    ("resnet50", f"{STEP}/check/torch_check_resnet50_fp16.json"),
    ("resnet50", f"{TUNE}/check/torch_check_resnet50_bf16.json"),
    ("resnet50", f"{TUNE}/check/torch_check_resnet50_fp16.json"),
    ("resnet50", f"{CLOSING}/check/torch_check_resnet50_fp32.json"),
]


def evidence_folder(path):
    """The folder of results/ whose README.md gives a record's provenance: results/NAME, or
    results/GROUP/NAME inside a group of folders (GROUPS)."""
    parts = path.split("/")
    return "/".join(parts[:3] if parts[1] in GROUPS else parts[:2])


def _record_folder(path):
    """The folder of results/ a record sits in, as a link to its README (the tree it was made from)."""
    folder = evidence_folder(path)
    return Fig(folder[len("results/"):], f"{folder}/README.md")


def table_torch_checks():
    header = ["model", "backend, precision", "records (tree)", "rows", "passed", "within tolerance",
              "zero in exact arithmetic", "\"as torch\"", "largest relative error",
              "largest distance from float64: scalebench / torch"]
    rows = []
    for model, path in TORCH_CHECKS:
        d = json_file(path)
        checked = d["rows"]
        zero = [r for r in checked if r["zero_gradient"]]
        within = [r for r in checked if not r["zero_gradient"] and r["rel_err"] <= r["tolerance"]]
        as_torch = [r for r in checked if r["passed"] and not r["zero_gradient"] and r not in within]
        largest = max(r["rel_err"] for r in checked if not r["zero_gradient"])
        sb64 = [r["scalebench_vs_fp64"] for r in checked if not r["zero_gradient"] and r.get("scalebench_vs_fp64") is not None]
        t64 = [r["torch_vs_fp64"] for r in checked if not r["zero_gradient"] and r.get("torch_vs_fp64") is not None]
        far = f"{max(sb64):.1e} / {max(t64):.1e}" if sb64 and t64 else "-"
        f = lambda text: Fig(text, path)  # noqa: E731
        rows.append([model, f"{d['backend']}, {d['precision']}", _record_folder(path), f(str(len(checked))),
                     f(str(sum(r["passed"] for r in checked))), f(str(len(within))), f(str(len(zero))),
                     f(str(len(as_torch))), f(f"{largest:.1e}"), f(far)])
    return header, "lllrrrrrrr", rows


def table_softmax_backward_without_renormalising():
    """The rows a PyTorch check failed on a tree whose bf16 softmax backward kept dP in bf16 and did not
    renormalise the stored P (docs/measurement.md: why dP stays fp32)."""
    path = "results/h200-one-gpu/cuda-graphs/torch_check_bert-base_bf16.json"
    failed = [r for r in json_file(path)["rows"] if not r["passed"]]
    if not failed:
        raise TableError(f"{path}: no failed row")
    f = lambda text: Fig(text, path)  # noqa: E731
    rows = [[f"`{r['quantity'].removeprefix('grad_norm ')}`", f(f"{r['scalebench']:.3g}"), f(f"{r['torch']:.3g}"), f(pct(r["rel_err"], 0)),
             f(pct(r["tolerance"], 1))] for r in failed]
    return ["gradient norm", "scalebench", "torch", "relative error", "tolerance"], "lrrrr", rows


# Op profiles (train --profile-ops) of the transformer step: (preset, batch, fused profile, unfused profile).
# The unfused profiles are of the same presets on a tree whose bf16 attention ran the unfused path
# (None: no such profile).
TRANSFORMER_PROFILES = [
    ("bert-base", 256, f"{CLOSING}/check/opprof_bert-base_b256.jsonl", f"{H200}/bert/opprof_ops.jsonl"),
    ("gpt2-small", 8, f"{EPILOGUES}/check/opprof_gpt2-small_b8.jsonl", "results/h200-reliability/nccl-stall-opprof/opprof/ops.jsonl"),
    ("gpt2-medium", 8, f"{CLOSING}/check/opprof_gpt2-medium_b8.jsonl", None),
]


def _op_profile(path, preset, batch, source=None):
    """The op_profile records of one preset and batch in a file: [(line, record)]. source: the config file the
    run read, where it is not the preset's own (a copy with one key changed)."""
    source = source or f"configs/{preset}.yaml"
    found = []
    for number, line in enumerate(_read(path).splitlines(), start=1):
        if line.strip():
            r = json.loads(line)
            if r.get("subcommand") == "op_profile" and _field(r, "config.source") == source \
                    and r["local_batch"] == batch:
                found.append((number, r))
    if not found:
        raise TableError(f"{path}: no op_profile records of {source} at batch {batch}")
    return found


def _rate(records):
    """Work over time of a group of ops: TFLOP/s when they compute on tensor cores, TB/s otherwise."""
    ms = sum(r["ms_per_step"] for _, r in records)
    flops = sum(r["op"]["flops"] * r["calls_per_step"] for _, r in records)
    if flops:
        return f"{flops / (ms / 1000) / 1e12:.0f} TFLOP/s"
    return f"{sum(r['op']['bytes'] * r['calls_per_step'] for _, r in records) / (ms / 1000) / 1e12:.1f} TB/s"


def table_attention_per_call():
    header = ["preset, batch: attention shape", "kernels", "forward ms per call", "TFLOP/s", "backward ms per call",
              "TFLOP/s", "ms per step (both)", "share of the step's op time"]
    rows = []
    for preset, batch, fused, unfused in TRANSFORMER_PROFILES:
        for kernels, path in (("fused", fused), ("unfused", unfused)):
            if path is None:
                continue
            profile = _op_profile(path, preset, batch)
            total = sum(r["ms_per_step"] for _, r in profile)
            cells, per_step = [], 0.0
            for kind in ("attention_forward", "attention_backward"):
                (line, r), = [(n, r) for n, r in profile if r["op"]["kind"] == kind]
                cells += [Fig(fmt(r["ms"]["median"], 3), path, line), Fig(fmt(r["achieved_tflops"], 0), path, line)]
                per_step += r["ms_per_step"]
                op = r["op"]
            heads = op["batch"] // batch
            mask = "causal" if "causal" in op["variant"] else "bidirectional"
            shape = f"{preset}, {batch}: seq {op['m']}, {heads} heads of {op['k']}, {mask}"
            variant = kernels + (", " + op["dtype"])
            rows.append([shape, variant] + cells + [Fig(fmt(per_step, 2), path), Fig(pct(per_step / total), path)])
    return header, "llrrrrrr", rows


def _op_group(r, padded_vocab):
    kind = r["op"]["kind"]
    if kind == "gemm":
        return "GEMMs over the vocabulary" if padded_vocab in (r["op"]["m"], r["op"]["n"], r["op"]["k"]) else "other GEMMs"
    names = {"attention_backward": "attention backward", "attention_forward": "attention forward",
             "residual_layernorm_backward": "residual + dropout + LayerNorm backward",
             "residual_layernorm_forward": "residual + dropout + LayerNorm forward",
             "activation_backward": "GELU backward", "activation_forward": "GELU forward", "bias_grad": "bias gradients",
             "labelled_bias_grad": "bias gradients",  # the decoder's, over its labelled rows
             "softmax_cross_entropy": "softmax cross-entropy", "adamw_step": "AdamW"}
    return names.get(kind, "the rest (embeddings, LayerNorm, dropout, add, casts)")


def table_transformer_op_time():
    profiles = []
    for preset, batch, fused, _ in TRANSFORMER_PROFILES:
        profile = _op_profile(fused, preset, batch)
        vocab = profile[0][1]["config"]["transformer"]["vocab"]
        groups = {}
        for n, r in profile:
            groups.setdefault(_op_group(r, -(-vocab // 128) * 128), []).append((n, r))
        profiles.append((preset, batch, fused, groups, sum(r["ms_per_step"] for _, r in profile)))
    header = ["op (per step)"] + [c for preset, batch, *_ in profiles
                                  for c in (f"{preset} b{batch} ms", "share", "rate")]
    first = profiles[0][3]
    order = sorted(first, key=lambda g: -sum(r["ms_per_step"] for _, r in first[g]))
    order.remove("the rest (embeddings, LayerNorm, dropout, add, casts)")
    order.append("the rest (embeddings, LayerNorm, dropout, add, casts)")
    rows = []
    for group in order:
        row = [group]
        for _, _, path, groups, total in profiles:
            ms = sum(r["ms_per_step"] for _, r in groups.get(group, []))
            row += [Fig(fmt(ms, 2), path), Fig(pct(ms / total), path), Fig(_rate(groups[group]), path)] if ms else ["-", "-", "-"]
        rows.append(row)
    rows.append(["sum of the op medians"] + [c for _, _, path, _, total in profiles
                                             for c in (Fig(fmt(total, 2), path), "100%", "")])
    return header, "l" + "rrr" * len(profiles), rows


def table_comm_vs_nccl_tests():
    header = ["collective", "algbw ratio, 8-256 MiB", "algbw ratio, 1-4 MiB", "time ratio below 1 KiB (median)"]
    rows = []
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        path, comm = _comm_compare(op)
        big = [sb / nt for size, (_, _, sb, nt) in comm["out"].items() if size >= 8 << 20]
        mid = [sb / nt for size, (_, _, sb, nt) in comm["out"].items() if 1 << 20 <= size <= 4 << 20]
        small = sorted(sb / nt for placement in comm.values() for size, (sb, nt, _, _) in placement.items() if size < 1024)
        median = small[len(small) // 2] if len(small) % 2 else (small[len(small) // 2 - 1] + small[len(small) // 2]) / 2
        rows.append([op, Fig(f"{min(big):.3f}-{max(big):.3f}", path), Fig(f"{min(mid):.3f}-{max(mid):.3f}", path),
                     Fig(f"{median:.3f}", path)])
    return header, "lrrr", rows


def _comm_run_times(op, tool):
    """Each run's time below 1 KiB of one tool's sweeps (comm_<op>_<tool>_<i>.txt, nccl-tests' table):
    [{size: (out-of-place us, in-place us)}]."""
    runs = []
    for i in range(1, 6):
        path = COMM_CMP.replace("compare", f"{tool}_{i}").format(op=op)
        runs.append({int(c[0]): (float(c[-8]), float(c[-4])) for c in (l.split() for l in _read(path).splitlines())
                     if c and not c[0].startswith("#") and int(c[0]) < 1024})
    return runs


def table_comm_small_sizes():
    """Below 1 KiB on one GPU: the median time of a call, and how far the runs of one tool spread."""
    header = ["collective", "in place µs: scalebench / nccl-tests", "out of place µs: scalebench / nccl-tests",
              "spread of five runs: scalebench", "nccl-tests"]
    rows = []
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        path, comm = _comm_compare(op)
        times = {placement: [(sb, nt) for size, (sb, nt, _, _) in comm[placement].items() if size < 1024]
                 for placement in ("in", "out")}
        row = [op] + [Fig(f"{_median([t[0] for t in times[p]]):.2f} / {_median([t[1] for t in times[p]]):.2f}", path)
                      for p in ("in", "out")]
        for tool in ("scalebench", "nccl_tests"):
            runs = _comm_run_times(op, tool)
            spreads = [max(r[size][p] for r in runs) / min(r[size][p] for r in runs) for size in runs[0] for p in (0, 1)]
            # max / min over the five runs per size and placement, the median of those: a figure over five
            # files, linked to the folder's README that lists them
            row.append(Fig(f"{_median(spreads):.2f}x", os.path.dirname(path) + "/README.md"))
        rows.append(row)
    return header, "lrrrr", rows


def table_stress_soak():
    path = "results/h200-reliability/comm-stress/stress.jsonl"
    header = ["interval", "workload", "steps", "samples/s", "drift", "replica checks", "ms per check", "mean power W"]
    rows = []
    for number, line in enumerate(_read(path).splitlines(), start=1):
        r = json.loads(line)
        if r.get("complete") is not False:
            continue
        power = r["telemetry_by_rank"][0]["power_w"]["avg"]
        f = lambda text: Fig(text, path, number)  # noqa: E731
        rows.append([str(r["interval"]), os.path.basename(r["workload_source"]), f(str(r["steps"])),
                     f(fmt(r["samples_per_s"], 0)), f(f"{r['drift_pct']:+.2f}%"), f(str(r["sdc_checks"])),
                     f(f"{r['sdc_check_ms'] / max(r['sdc_checks'], 1):.2f}"), f(fmt(power, 0))])
    line, summary = record(path, complete=True)
    rows.append(["whole run", "both", Fig(str(summary["total_steps"]), path, line), "", "",
                 Fig(f"{summary['sdc_checks']}, {len(summary['sdc_events'])} mismatches", path, line), "", ""])
    return header, "llrrrrrr", rows


GUIDE = "results/buyers-guide-a100-4090/guide.json"


def table_buyers_guide():
    """compare's verdicts per scenario and workload (projected); * where a profile's range flips the cell."""
    guide = json_file(GUIDE)
    header = ["scenario", "workload", "ample budget", "limited budget"]
    rows = []
    for scenario in guide["scenarios"]:
        by_workload = {}
        for cell in scenario["cells"]:
            winner = cell["winner"] + (" *" if cell["flips"] else "")
            by_workload.setdefault(cell["workload"], {})[cell["budget"]] = Fig(winner, GUIDE)
        for i, (workload, cells) in enumerate(by_workload.items()):
            rows.append([scenario["scenario"] if i == 0 else "", workload, cells.get("ample", "-"),
                         cells.get("limited", "-")])
    return header, "llll", rows


SHARDED_NLP = "results/buyers-guide-a100-4090/nlp-sharded.json"


def table_sharded_nlp():
    """compare's NLP fine-tuning scenario for GPT-2 XL on the A100 40GB and both 4090s: per card and
    GPU count, the sharding mode that fits (each mode's footprint), its samples/s and collectives."""
    guide = json_file(SHARDED_NLP)
    workload = next(w for w in guide["workloads"] if w["workload"].startswith("gpt2-xl"))
    header = ["profile", "GPUs", "runs in", "GiB per GPU: none, optimizer, gradients, parameters", "fits", "samples/s",
              "collectives per step, ms"]
    rows = []
    for p in workload["profiles"]:
        for x in p["by_gpus"]:
            if x["gpus"] not in (4, 8):
                continue
            footprints = ", ".join(f"{m['memory_per_gpu_gb']:.2f}" for m in x["sharding_fit"])
            comm = (f"all-reduce {x['allreduce_ms']:.1f}" if x["sharding"] == "none"
                    else f"reduce-scatter {x['reduce_scatter_ms']:.1f} + all-gather {x['all_gather_ms']:.1f}")
            rows.append([p["name"], str(x["gpus"]), Fig(x["sharding"], SHARDED_NLP), Fig(footprints, SHARDED_NLP),
                         "yes" if x["fits_memory"] else "no", Fig(fmt(x["samples_per_s"]), SHARDED_NLP), Fig(comm, SHARDED_NLP)])
    for cell in next(s for s in guide["scenarios"] if s["scenario"] == "NLP fine-tuning")["cells"]:
        if cell["workload"] == workload["workload"]:
            rows.append([f"verdict, {cell['budget']} budget", "4", Fig(cell["winner"] or "none qualifies", SHARDED_NLP),
                         "", "", "", ""])
    return header, "lrlllrl", rows


SHARDED_XL = "results/buyers-guide-a100-4090/sharding-projection/gpt2-xl.jsonl"


def table_sharded_transports():
    """GPT-2 XL at 8 GPUs per transport, unsharded and in each sharded mode (projected): the footprint, what the
    step's collectives take and where they land in the step."""
    header = ["profile", "link", "mode", "GiB per GPU", "fits", "collectives per step, ms", "exposed comm ms",
              "optimizer ms", "step ms", "samples/s [band]"]
    rows = []
    for hw in ("a100-sxm4-40gb", "rtx4090-24gb-pcie4-p2p", "rtx4090-24gb-pcie4"):
        for mode in ("none", "optimizer", "gradients", "parameters"):
            line, r = record(SHARDED_XL, hardware__name=hw, sharding__mode=mode)
            s = r["sharding"]
            comm = (f"all-reduce {r['allreduce_ms']:.1f}" if mode == "none"
                    else f"reduce-scatter {s['reduce_scatter']['ms']:.1f} + all-gather {s['all_gather']['ms']:.1f}")
            band = r["samples_per_s_band"]
            rows.append([hw, r["hardware"]["node"]["link"], mode, Fig(f"{r['memory_per_gpu_gb']:.2f}", SHARDED_XL, line),
                         "yes" if r["fits_memory"] else "no", Fig(comm, SHARDED_XL, line),
                         Fig(fmt(r["exposed_comm_ms"]["median"]), SHARDED_XL, line),
                         Fig(fmt(r["optimizer_ms"]["median"]), SHARDED_XL, line), Fig(fmt(r["step_ms"]["median"]), SHARDED_XL, line),
                         Fig(f"{fmt(r['samples_per_s'])} [{fmt(band[0])}-{fmt(band[1])}]", SHARDED_XL, line)])
    return header, "lllrllrrrr", rows


def table_cpu_comm_output():
    path = f"{CPU}/comm.txt"
    lines = [l for l in _read(path).splitlines() if l.startswith(("#       size", "#        (B)", "           8 ",
                                                                  "        2048 ", "     2097152 ", "# Out of", "# Avg",
                                                                  "# Alpha"))]
    return "excerpt", path, lines


# ---------------------------------------------------------------------------------------------
# The projection's validation: results/projection-validation/validation.jsonl, the rows
# tests/unit/test_projection_validation.cpp compares (and checks against the code), one check each.

VALIDATION = "results/projection-validation/validation.jsonl"


def _check(name):
    """A check's rows and its summary line: ([(line, row)], (line, summary) or None)."""
    rows, summary = [], None
    for number, line in enumerate(_read(VALIDATION).splitlines(), start=1):
        r = json.loads(line) if line.strip() else {}
        if r.get("check") != name:
            continue
        if "summary" in r:
            summary = (number, r["summary"])
        else:
            rows.append((number, r))
    if not rows and summary is None:
        raise TableError(f"{VALIDATION}: no rows of check '{name}'")
    return rows, summary


def _v(text, line):
    return Fig(text, VALIDATION, line)


def _err(r, line):
    return _v(f"{r['error_pct']:+.1f}%", line)


def _entry(r, key="entry"):
    """A published entry's id, linked to its line in the data file."""
    for number, text in enumerate(_read(r["data"]).splitlines(), start=1):
        if text.strip() == f"- id: {r[key]}":
            return Fig(r[key], r["data"], number)
    raise TableError(f"{r['data']}: no entry '{r[key]}'")


def _median(values):
    values = sorted(values)
    h = len(values) // 2
    return values[h] if len(values) % 2 else (values[h - 1] + values[h]) / 2


def _error_groups(check, groups, extra=None):
    """Per group of a check's rows: rows, signed error range, median absolute error (and extra's cells), each
    linked to the record (a figure over several of its lines)."""
    rows, _ = _check(check)
    out = []
    for label, keep in groups:
        chosen = [(n, r) for n, r in rows if keep(r)]
        if not chosen:
            raise TableError(f"{VALIDATION}: no row of check '{check}' in group '{label}'")
        errors = [r["error_pct"] for _, r in chosen]
        whole = lambda text: Fig(text, VALIDATION)  # noqa: E731  (a figure over several rows: the record)
        cells = [label, whole(str(len(chosen))), whole(f"{min(errors):+.1f}%" + (f" to {max(errors):+.1f}%" if max(errors) > min(errors) else "")),
                 whole(f"{_median([abs(e) for e in errors]):.1f}%")]
        out.append(cells + (extra(chosen) if extra else []))
    return out


CHECKS = [
    ("measured_step_time", "H200 step time of every one-GPU `train` run under `results/`"),
    ("footprint", "footprint against NVML's peak memory in use, the same runs"),
    ("a100_over_rtx4090", "Lambda's A100/RTX 4090 throughput ratios (1 and 2 GPUs)"),
    ("rtx4090_staged_speedup", "RTX 4090 two-GPU host-staged speed-ups"),
    ("published_throughput", "published training throughput, validation rows (calibration rows apart)"),
    ("published_speedup", "published speed-ups T(N)/T(1), validation rows (calibration rows apart)"),
    ("allreduce_busbw", "published all-reduce busbw"),
]


def table_projection_summary():
    header = ["check", "rows", "statistic", "result", "target", "the test fails at"]
    rows = []
    for check, label in CHECKS:
        _, (line, s) = _check(check)
        result = f"{s['value_pct']:.1f}%" + (f"; {s['inside_band']} of {s['rows']} inside the band"
                                             if "inside_band" in s else "")
        if "naive_median_pct" in s:  # the naive model beside the median: speed-up = N
            result += f"; speed-up = N: {s['naive_median_pct']:.1f}%"
        for key in sorted(k for k in s if k.startswith("inside_band_")):
            result += f"; {key[len('inside_band_'):]}: {s[key]} inside"
        target = "-" if s["target_pct"] is None else f"{s['target_pct']:.0f}%"
        rows.append([label, _v(str(s["rows"]), line), s["statistic"], _v(result, line), target,
                     _v(f"{s['bound_pct']:.0f}%", line)])
    return header, "lrlrrr", rows


def _run(r):
    """A measured run's record, relative to results/, linked to its line."""
    return Fig(r["record"][len("results/"):], r["record"], r["line"])


def table_projection_measured_runs():
    header = ["run", "model, batch, precision, CUDA graphs", "step ms measured", "projected", "error", "op profiles of"]
    rows = []
    for n, r in _check("measured_step_time")[0]:
        rows.append([_run(r), f"{r['model']}, {r['batch']}, {r['precision']}, {'on' if r['cuda_graphs'] else 'off'}",
                     Fig(fmt(r["measured"], 3), r["record"], r["line"]), _v(fmt(r["projection"], 3), n), _err(r, n),
                     ", ".join(r["op_profiles_of"]) or "none"])
    return header, "llrrrl", rows


def table_projection_footprint():
    header = ["run", "model, batch, precision", "measured GiB (NVML, peak)", "footprint GiB", "error"]
    rows = []
    for n, r in _check("footprint")[0]:
        rows.append([_run(r), f"{r['model']}, {r['batch']}, {r['precision']}", Fig(fmt(r["measured"], 2), r["record"], r["line"]),
                     _v(fmt(r["projection"], 2), n), _err(r, n)])
    return header, "llrrr", rows


def table_projection_by_folder():
    """Per folder of results/ (its README gives the tree): the step time's and the footprint's errors."""
    folders = sorted({evidence_folder(r["record"]) for _, r in _check("measured_step_time")[0]})
    header = ["folder (tree)", "op profiles of other models", "step time: runs", "error", "median absolute error",
              "footprint: runs", "error", "median absolute error"]
    rows = []
    for folder in folders:
        inside = lambda r: evidence_folder(r["record"]) == folder  # noqa: E731
        step = _error_groups("measured_step_time", [(folder, inside)])[0]
        profiled = sorted({m for _, r in _check("measured_step_time")[0] if inside(r) for m in r["op_profiles_of"]})
        try:
            memory = _error_groups("footprint", [(folder, inside)])[0][1:]
        except TableError:  # no run of the folder recorded NVML's memory
            memory = ["-", "-", "-"]
        rows.append([_record_folder(f"{folder}/"), ", ".join(profiled) or "none"] + step[1:] + memory)
    return header, "llrrrrrr", rows


def table_projection_a100_over_rtx4090():
    header = ["A100 row", "RTX 4090 row", "GPUs", "published A100/4090", "projected", "error"]
    rows = []
    for n, r in _check("a100_over_rtx4090")[0]:
        rows.append([_entry(r, "a100_entry"), _entry(r, "rtx4090_entry"), str(r["gpus"]), _v(f"{r['published']:.2f}", n),
                     _v(f"{r['projection']:.2f}", n), _err(r, n)])
    return header, "llrrrr", rows


def table_projection_a100_over_rtx4090_groups():
    resnet = lambda r: "resnet" in r["config"]  # noqa: E731
    groups = [("BERT-base and BERT-large (fp16)", lambda r: not resnet(r)),
              ("ResNet-50 TF32", lambda r: resnet(r) and r["precision"] == "tf32"),
              ("ResNet-50 AMP (fp16)", lambda r: resnet(r) and r["precision"] == "fp16"),
              ("every pair", lambda r: True)]
    return ["pairs", "rows", "error", "median absolute error"], "lrrr", _error_groups("a100_over_rtx4090", groups)


def table_projection_staged_speedups():
    header = ["entry", "published speed-up", "projected (central)", "error", "band (every range at each end)",
              "published inside"]
    rows = []
    for n, r in _check("rtx4090_staged_speedup")[0]:
        lo, hi = r["band"]
        rows.append([_entry(r), _v(f"{r['published']:.2f}", n), _v(f"{r['projection']:.2f}", n), _err(r, n),
                     _v(f"{lo:.2f}-{hi:.2f}", n), _v("yes" if r["inside_band"] else "no", n)])
    return header, "lrrrrl", rows


def _use(r):
    """A published row's use: validation, or the profile number a calibration row set."""
    return "validation" if r["use"] == "validation" else f"calibration: sets `{r['sets']}`"


def _published(data_file):
    header = ["entry", "use", "profile", "transport, data", "model, batch/GPU", "GPUs", "published samples/s", "projected",
              "error", "published MFU (scalebench's FLOPs)", "scalebench's footprint"]
    rows = []
    for n, r in _check("published_throughput")[0]:
        if r["data"] != data_file:
            continue
        fit = f"{r['footprint_gib']:.1f} GiB" + ("" if r["fits"] else " (does not fit)")
        rows.append([_entry(r), _use(r), r["profile"], f"{r['transport']}, {r['input']}", f"{r['workload']}, {r['batch']}",
                     str(r["gpus"]), _v(fmt(r["published"], 1), n),
                     _v(fmt(r["projection"], 1), n), _err(r, n), _v(pct(r["published_mfu"]), n), _v(fit, n)])
    return header, "lllllrrrrrr", rows


def table_projection_published_bert():
    return _published("results/published/bert_throughput.yaml")


def table_projection_published_resnet50():
    return _published("results/published/resnet50_throughput.yaml")


def table_projection_published_groups():
    gpu = lambda *names: lambda r: r["profile"].startswith(names)  # noqa: E731
    lambda_ = lambda r: r["entry"].startswith("lambda")  # noqa: E731
    bert = lambda r: r["workload"].startswith("bert")  # noqa: E731
    groups = [("A100 rows", gpu("a100")), ("RTX 4090 rows", gpu("rtx4090")), ("H100 rows", gpu("h100")),
              ("H200 rows", gpu("h200")),
              ("NVIDIA DeepLearningExamples, A100", lambda r: r["entry"].startswith("dle")),
              ("Lambda, BERT SQuAD on A100s", lambda r: lambda_(r) and bert(r) and r["profile"].startswith("a100")),
              ("Lambda, BERT SQuAD on the RTX 4090", lambda r: lambda_(r) and bert(r) and r["profile"].startswith("rtx4090")),
              ("Lambda, ResNet-50 AMP (fp16)", lambda r: lambda_(r) and not bert(r) and r["precision"] == "fp16"),
              ("Lambda, ResNet-50 TF32", lambda r: lambda_(r) and not bert(r) and r["precision"] == "tf32"),
              ("validation rows (they set no profile number)", lambda r: r["use"] == "validation"),
              ("calibration rows", lambda r: r["use"] == "calibration"),
              ("every row", lambda r: True)]

    def mfu(chosen):
        values = [r["published_mfu"] for _, r in chosen]
        return [Fig(f"{pct(min(values))} to {pct(max(values))}", VALIDATION)]

    return (["rows of", "rows", "error", "median absolute error", "published MFU (scalebench's FLOPs)"], "lrrrr",
            _error_groups("published_throughput", groups, mfu))


def table_projection_published_speedups():
    header = ["entry", "use", "GPUs", "transport that ran", "published speed-up", "projected", "error",
              "band (every range at each end)", "inside", "ms per step beyond the model", "cause"]
    rows = [[_entry(r), _use(r), str(r["gpus"]), r["transport"], _v(f"{r['published']:.2f}", n), _v(f"{r['projection']:.2f}", n), _err(r, n),
             _v(f"{r['band'][0]:.2f}-{r['band'][1]:.2f}", n), _v("yes" if r["inside_band"] else "no", n),
             _v(f"{r['unexplained_ms']:+.1f} of {r['published_step_1gpu_ms']:.0f}", n), _v(r["cause"], n)]
            for n, r in _check("published_speedup")[0]]
    return header, "llrlrrrrlrl", rows


def table_projection_speedup_causes():
    """The published speed-ups by the cause their rows carry (its figures stripped): how many of each."""
    rows, _ = _check("published_speedup")
    groups = {}
    for n, r in rows:
        groups.setdefault(r["cause"].split(":")[0], []).append(r)
    out = []
    for cause, chosen in groups.items():
        errors = [r["error_pct"] for r in chosen]
        out.append([cause, Fig(str(len(chosen)), VALIDATION), Fig(f"{min(errors):+.1f}% to {max(errors):+.1f}%", VALIDATION),
                    ", ".join(sorted({r["entry"].split("-")[0] for r in chosen}))])
    return ["cause", "rows", "error", "sources"], "lrrl", out


def table_projection_resnet_amp_over_tf32():
    header = ["AMP row", "TF32 row", "profile", "batch AMP, TF32", "AMP memory format", "input", "published AMP/TF32",
              "projected", "error"]
    rows = [[_entry(r, "amp_entry"), _entry(r, "tf32_entry"), r["profile"], f"{r['batch'][0]}, {r['batch'][1]}",
             r["memory_format"].upper(), r["input"], _v(f"{r['published']:.2f}", n), _v(f"{r['projection']:.2f}", n),
             _err(r, n)]
            for n, r in _check("resnet_amp_over_tf32")[0]]
    return header, "llllllrrr", rows


def _tf32_pairs(rows):
    """The TF32 pairs of the candidates check in record order, each named for its A100 row: (a100 entry, header)."""
    pairs = []
    for _, r in rows:
        if r["a100_entry"] not in [p for p, _ in pairs]:
            a100 = r["a100_entry"][len("lambda-a100-"):r["a100_entry"].index("-fp32-")].replace("-", " ").upper()
            a100 = a100.replace("PCIE", "PCIe")
            pairs.append((r["a100_entry"], f"A100 {a100}, {r['gpus']} GPU{'s' if r['gpus'] > 1 else ''}"))
    return pairs


def table_projection_resnet_tf32_candidates():
    rows, _ = _check("resnet_tf32_pair_candidates")
    candidates = [(n, r) for n, r in rows if "candidate" in r]
    pairs = _tf32_pairs(candidates)
    header = ["candidate", "what it changes (source)"] + [name for _, name in pairs] + ["median absolute error"]
    out = []
    for name in dict.fromkeys(r["candidate"] for _, r in candidates):
        mine = [(n, r) for n, r in candidates if r["candidate"] == name]
        cells = [_err(r, n) for a100, _ in pairs for n, r in mine if r["a100_entry"] == a100]
        whole = Fig(f"{_median([abs(r['error_pct']) for _, r in mine]):.1f}%", VALIDATION)  # over several rows
        out.append([name, mine[0][1]["source"]] + cells + [whole])
    return header, "ll" + "r" * (len(pairs) + 1), out


def table_projection_resnet_tf32_needs():
    """Per TF32 pair, the value each term would need alone, with the profile's and the datasheet's beside it."""
    rows, _ = _check("resnet_tf32_pair_candidates")
    terms = [(n, r) for n, r in rows if "term" in r]
    names = list(dict.fromkeys(r["term"] for _, r in terms))
    units = {r["term"]: r["unit"] for _, r in terms}
    header = ["pair"] + [f"{t}: {units[t]} needed (profile; datasheet)" for t in names]
    out = []
    for a100, pair in _tf32_pairs(terms):
        cells = [pair]
        for t in names:
            n, r = next((n, r) for n, r in terms if r["term"] == t and r["a100_entry"] == a100)
            value = (lambda x: fmt(x, 0)) if r["unit"].endswith("GB/s") else (lambda x: f"{x:.3f}")
            needed = value(r["needed"]) if r["needed"] is not None else "none up to 8x"
            cells.append(_v(f"{needed} ({value(r['central'])}; {value(r['datasheet'])})", n))
        out.append(cells)
    return header, "l" + "r" * len(names), out


H200_CURRENT = "results/h200-one-gpu/step-vs-pytorch/"


def table_projection_h200_uncalibrated():
    """The H200 runs of the current tree's folder, per preset: the step-time error with the folder's
    calibration and from the profile alone (median over the preset's runs)."""
    rows = [(n, r) for n, r in _check("measured_step_time")[0] if r["record"].startswith(H200_CURRENT)]
    if not rows:
        raise TableError(f"{VALIDATION}: no measured run under {H200_CURRENT}")
    presets = {}
    for n, r in rows:
        presets.setdefault(r["preset"], []).append((n, r))
    out = []
    for preset, chosen in list(presets.items()) + [("every run", rows)]:
        whole = lambda text: Fig(text, VALIDATION)  # noqa: E731
        batches = ", ".join(str(b) for b in sorted({r["batch"] for _, r in chosen}))
        cal = _median([r["error_pct"] for _, r in chosen])
        uncal = _median([r["error_uncalibrated_pct"] for _, r in chosen])
        out.append([preset, batches, whole(str(len(chosen))), whole(f"{cal:+.1f}%"), whole(f"{uncal:+.1f}%")])
    return (["preset", "batch", "runs", "step-time error, calibrated (median)", "from the profile alone (median)"],
            "llrrr", out)


def table_projection_h200_op_kinds():
    """Per op kind of the H200's op profiles: measured and roofline ms per step; kinds whose gap is at
    least 1% of the step, then the rest together and the whole step."""
    header = ["model, batch", "op kind", "measured ms per step", "roofline (profile alone)", "error",
              "gap, % of the step"]
    out = []
    rows, _ = _check("h200_op_kinds_uncalibrated")
    for record in dict.fromkeys(r["record"] for _, r in rows):
        mine = [(n, r) for n, r in rows if r["record"] == record]
        kinds = sorted([(n, r) for n, r in mine if r["op"] != "every op"], key=lambda x: -abs(x[1]["gap_pct_of_step"]))
        shown = [(n, r) for n, r in kinds if abs(r["gap_pct_of_step"]) >= 1.0]
        rest = [r for n, r in kinds if abs(r["gap_pct_of_step"]) < 1.0]
        for n, r in shown + [x for x in mine if x[1]["op"] == "every op"]:
            out.append([f"{r['preset']}, {r['batch']}", r["op"] if r["op"] == "every op" else f"`{r['op']}`",
                        Fig(fmt(r["measured"], 2), r["record"]), _v(fmt(r["projection"], 2), n), _err(r, n),
                        _v(f"{r['gap_pct_of_step']:+.1f}%", n)])
        if rest:
            measured, projected = sum(r["measured"] for r in rest), sum(r["projection"] for r in rest)
            gap = sum(r["gap_pct_of_step"] for r in rest)
            out.insert(len(out) - 1, [f"{rest[0]['preset']}, {rest[0]['batch']}", f"{len(rest)} other kinds",
                                      Fig(fmt(measured, 2), record), Fig(fmt(projected, 2), VALIDATION),
                                      Fig(f"{100 * (projected - measured) / measured:+.1f}%", VALIDATION),
                                      Fig(f"{gap:+.1f}%", VALIDATION)])
    return header, "llrrrr", out


def table_projection_allreduce():
    header = ["entry", "use", "profile", "GPUs", "message", "published busbw GB/s", "projected", "error", "band",
              "inside"]
    rows = [[_entry(r), r["use"], r["profile"], f"{r['nodes']} x {r['gpus_per_node']}", f"{r['message_mib']:.0f} MiB",
             _v(fmt(r["published"], 1), n), _v(fmt(r["projection"], 1), n), _err(r, n),
             _v(f"{fmt(r['band'][0], 1)}-{fmt(r['band'][1], 1)}", n), _v("yes" if r["inside_band"] else "no", n)]
            for n, r in _check("allreduce_busbw")[0]]
    return header, "lllllrrrrl", rows


def table_projection_h200_cards():
    header = ["test", "unit", "projected", "measured", "error", "measured record"]
    rows = []
    for n, r in _check("h200_card_tests")[0]:
        digits = 2 if r["unit"] == "ms" else 1
        rows.append([r["test"], r["unit"], _v(fmt(r["projection"], digits), n), Fig(fmt(r["measured"], digits), r["record"]),
                     _err(r, n), r["record"][len("results/"):]])
    return header, "llrrrl", rows


def table_projection_cudnn_convs():
    """The H200's cuDNN convolutions (op profiles) against the GEMM of their implicit shape, per step."""
    header = ["model, batch", "convolutions", "op", "measured ms per step", "projected", "error"]
    rows = []
    for n, r in _check("cudnn_conv_gemm_model")[0]:
        rows.append([f"{r['model']}, {r['batch']}", r["convolutions"],
                     r["op"] if r["op"] == "all" else f"`{r['op']}`", Fig(fmt(r["measured"], 2), r["record"]),
                     _v(fmt(r["projection"], 2), n), _err(r, n)])
    return header, "lllrrr", rows


def table_projection_gemm_efficiency():
    """Each profile's large-shape GEMM efficiency by precision; profiles with the same list share a row."""
    precisions = ["fp32", "tf32", "bf16", "fp16"]
    shared = {}
    for n, r in _check("gemm_large_shape_efficiency")[0]:
        key = tuple(f"{r[p]:.3f}" for p in precisions)
        shared.setdefault(key, []).append((n, r["profile"]))
    rows = [[", ".join(f"`{name}`" for _, name in profiles)] + [_v(v, profiles[0][0]) for v in key]
            for key, profiles in shared.items()]
    return ["profiles", *precisions], "lrrrr", rows


# The kernels' history, oldest tree first (the trees' commit dates; each folder's README names its tree):
# (folder, what the tree changed). The last row is the current tree.
KERNEL_HISTORY = [
    ("h200-kernel-history/resnet", "the ResNet and its CUDA kernels (im2col convolutions)"),
    ("h200-kernel-history/attention", "fused attention for bf16/fp16"),
    ("h200-kernel-history/cudnn", "the cuDNN convolution engine, fused BatchNorm/ReLU/add"),
    ("h200-kernel-history/fused", "residual add + dropout + LayerNorm fused; the vocabulary padded to 128"),
    ("h200-kernel-history/epilogues", "bias+GELU and bias epilogues in cuBLASLt"),
    ("h200-kernel-history/decoder-bias", "BERT's decoder bias gradient as its own pass"),
    ("h200-kernel-history/large-presets", "bert-large and gpt2-medium beside PyTorch"),
    ("h200-kernel-history/dropout-quad", "one dropout hash per four elements"),
    ("h200-kernel-history/ncu-attention", "Nsight Compute on the fused attention forward"),
    ("h200-kernel-history/fixed-pass", "attention's fixed-pass tile loads; the max pool's argmax kept"),
    ("h200-kernel-history/pool-backward", "the max-pool backward by 2x2 blocks; the stem's im2col staged"),
    ("h200-kernel-history/layernorm-one-pass", "the one-pass LayerNorm backward; the max-pool block forward"),
    ("h200-kernel-history/maxpool-registers", "the max-pool forward's 5x5 patch in registers"),
    ("h200-kernel-history/maxpool-rows", "two-vector elementwise maps; the three-row max-pool forward"),
    ("h200-kernel-history/layernorm-gelu", "fused LayerNorm, short-sequence attention and GELU kernels"),
    ("h200-kernel-history/gemm-algorithms", "cuBLASLt's algorithm timed; the labelled-rows column sums"),
    ("h200-one-gpu/step-vs-pytorch", "the current tree"),
]


def _history_transformer(folder, preset, batch):
    """A preset's bf16 samples/s at a batch in a tree, or '-' where the tree did not run it."""
    for bench in (f"{folder}/bench", f"{folder}/bert"):
        if os.path.isfile(os.path.join(ROOT, bench, f"scalebench_{preset}_b{batch}.jsonl")):
            path, line, sb, _ = _transformer_run(bench, preset, batch)
            if sb["config"]["precision"] != "bf16":
                raise TableError(f"{path}:{line}: precision {sb['config']['precision']}, expected bf16")
            return Fig(fmt(sb["samples_per_s"], 0), path, line)
    return "-"


def _history_resnet50(folder, engine):
    """ResNet-50's bf16 images/s at batch 256 on one engine in a tree, or '-'."""
    for path in (f"{folder}/bench_resnet/scalebench_resnet50_{engine}_b256.jsonl",
                 f"{folder}/scalebench_resnet50_{engine}_b256.jsonl",
                 f"{folder}/resnet50_b256_final.jsonl" if engine == "im2col" else ""):
        if path and os.path.isfile(os.path.join(ROOT, path)):
            line, r = record(path, world_size=1)
            if r["precision"] != "bf16" or r["config"]["batch_size"] != 256:
                raise TableError(f"{path}:{line}: not ResNet-50 bf16 at batch 256")
            return Fig(fmt(r["samples_per_s"], 0), path, line)
    return "-"


HISTORY_TRANSFORMERS = [("bert-base", 32), ("bert-base", 256), ("bert-large", 32), ("gpt2-small", 8), ("gpt2-medium", 8)]


def table_kernel_history():
    header = (["tree (folder)", "what it changed"] + [f"{p} b{b}" for p, b in HISTORY_TRANSFORMERS]
              + ["ResNet-50 b256 cuDNN", "ResNet-50 b256 im2col"])
    rows = []
    for folder, change in KERNEL_HISTORY:
        rows.append([_record_folder(f"results/{folder}/"), change]
                    + [_history_transformer(f"results/{folder}", p, b) for p, b in HISTORY_TRANSFORMERS]
                    + [_history_resnet50(f"results/{folder}", e) for e in ("cudnn", "im2col")])
    return header, "ll" + "r" * (len(header) - 2), rows


TABLES = {name[len("table_"):]: fn for name, fn in globals().items() if name.startswith("table_")}


# ---------------------------------------------------------------------------------------------
# Rendering and the files


def render(name, doc_dir):
    made = TABLES[name]()
    if made[0] == "excerpt":
        _, path, lines = made
        link = os.path.relpath(os.path.join(ROOT, path), doc_dir)
        return ["```"] + lines + ["```", f"(lines of [{path}]({link}))"]
    header, align, rows = made
    cell = lambda c: c.render(doc_dir) if isinstance(c, Fig) else c  # noqa: E731
    out = ["| " + " | ".join(header) + " |",
           "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def documents():
    """README.md, docs/*.md and the index of each group of results/ folders."""
    return ([os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
            + [os.path.join(ROOT, "results", g, "README.md") for g in GROUPS
               if os.path.isfile(os.path.join(ROOT, "results", g, "README.md"))])


def regenerate(path, problems):
    """The file's text with every table regenerated; problems get 'file:line: reason'."""
    rel = os.path.relpath(path, ROOT)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i, in_code = [], 0, False
    while i < len(lines):
        out.append(lines[i])
        if lines[i].startswith("```"):
            in_code = not in_code  # a marker quoted in a code block is not a table
        m = None if in_code else MARKER.match(lines[i].strip())
        i += 1
        if not m:
            continue
        start = i
        while i < len(lines) and lines[i].strip() != END_MARKER:
            i += 1
        if i == len(lines):
            problems.append(f"{rel}:{start}: table '{m.group(1)}' has no closing {END_MARKER}")
            out.extend(lines[start:])
            break
        name = m.group(1)
        if name not in TABLES:
            problems.append(f"{rel}:{start}: unknown table '{name}' (known: {', '.join(sorted(TABLES))})")
            out.extend(lines[start:i])
            continue
        indent = lines[start - 1][:len(lines[start - 1]) - len(lines[start - 1].lstrip())]  # a table inside a list item
        try:
            out.extend(indent + line for line in render(name, os.path.dirname(path)))
        except (TableError, KeyError, ValueError, IndexError) as e:
            problems.append(f"{rel}:{start}: table '{name}': {e}")
            out.extend(lines[start:i])
    return "\n".join(out)


def provenance_problems():
    """Every folder of results/ that holds records (at any depth) says where they came from; a group
    of folders has its index README.md and each folder in it its own."""
    problems = []
    results = os.path.join(ROOT, "results")
    folders = []
    for entry in sorted(os.listdir(results)):
        if entry in GROUPS:
            if not os.path.isfile(os.path.join(results, entry, "README.md")):
                problems.append(f"results/{entry}/: a group of folders without its index README.md")
            folders += [f"{entry}/{sub}" for sub in sorted(os.listdir(os.path.join(results, entry)))]
        else:
            folders.append(entry)
    for entry in folders:
        folder = os.path.join(results, entry)
        if os.path.isdir(folder) and glob.glob(os.path.join(folder, "**", "*.jsonl"), recursive=True):
            if not os.path.isfile(os.path.join(folder, "README.md")):
                problems.append(f"results/{entry}/: records without a README.md giving tree, command and machine")
    for stray in sorted(glob.glob(os.path.join(results, "*.jsonl"))):
        problems.append(f"{os.path.relpath(stray, ROOT)}: a record outside a folder with a README.md")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when a table differs from its records")
    args = parser.parse_args()
    problems = provenance_problems()
    changed = []
    for path in documents():
        with open(path, encoding="utf-8") as f:
            before = f.read()
        after = regenerate(path, problems)
        if after != before:
            changed.append(os.path.relpath(path, ROOT))
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(after)
    if args.check:
        problems += [f"{name}: a table differs from its records (run results/tables.py)" for name in changed]
    for p in problems:
        print(f"tables: {p}", file=sys.stderr)
    if not args.check:
        for name in changed:
            print(f"tables: rewrote {name}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
