#!/usr/bin/env python3
"""Reference for `scalebench gemm`: torch.mm timed the way scalebench times cuBLASLt.

Same method as src/commands/gemm_bench.cpp: uniform [-1, 1) operands, A/B buffer sets rotated so one
pass over them is three L2s (no timing of the cache), C preallocated in the input dtype,
warm-up products, then every product timed between two CUDA events, all issued before the
GPU reaches them (so small products time the GPU, not the launch rate); median/min/max ms;
TFLOP/s = 2MNK / median. fp32 runs with torch.backends.cuda.matmul.allow_tf32 = False,
tf32 with True.

  python3 tests/reference/torch_mm.py                      # the default cases, as a table
  python3 tests/reference/torch_mm.py --size 4096 --dtype bf16,fp16 --json
  python3 tests/reference/torch_mm.py --compare runs/gemm.jsonl
"""
import argparse
import json
import math
import re
import statistics
import sys

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32}
DEFAULT_CASES = [(8192, 8192, 8192, "fp16"), (8192, 8192, 8192, "bf16"),
                 (4096, 4096, 4096, "fp32"), (4096, 4096, 4096, "tf32")]
WORKSPACE = 32 << 20  # scalebench's cuBLASLt workspace; only used in the memory budget here


def parse_size(text):
    m = re.fullmatch(r"\s*([0-9]+)(?:[xX]([0-9]+)[xX]([0-9]+))?\s*", text)
    if not m:
        raise SystemExit(f"--size '{text}': expected MxNxK or N")
    dims = [int(g) for g in m.groups() if g is not None]
    if any(d <= 0 for d in dims):
        raise SystemExit(f"--size '{text}': dimensions must be positive")
    return tuple(dims) if len(dims) == 3 else (dims[0],) * 3


def cases_from(sizes, dtypes):
    for d in dtypes:
        if d not in DTYPES:
            raise SystemExit(f"--dtype '{d}': expected one of {', '.join(DTYPES)}")
    if not sizes and not dtypes:
        return list(DEFAULT_CASES)
    shapes = [parse_size(s) for s in sizes]
    out = []
    for d in dtypes or list(DTYPES):
        if not shapes:
            n = 4096 if d in ("fp32", "tf32") else 8192
            out.append((n, n, n, d))
        out.extend((m, n, k, d) for (m, n, k) in shapes)
    return out


def time_mm(m, n, k, dtype, warmup, iters, device):
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    torch.cuda.set_device(device)
    tdtype = DTYPES[dtype]
    elem = torch.tensor([], dtype=tdtype).element_size()
    props = torch.cuda.get_device_properties(device)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    set_bytes = (m * k + k * n) * elem
    sets = max(1, min(4096, -(-3 * l2 // set_bytes)))
    free, _ = torch.cuda.mem_get_info(device)
    room = max(0, free // 2 - m * n * elem - WORKSPACE)
    sets = min(sets, max(1, room // set_bytes))

    gen = torch.Generator(device=f"cuda:{device}").manual_seed(1)
    a0 = (torch.rand(m, k, device=device, generator=gen) * 2 - 1).to(tdtype)
    b0 = (torch.rand(k, n, device=device, generator=gen) * 2 - 1).to(tdtype)
    operands = [(a0, b0)] + [(a0.clone(), b0.clone()) for _ in range(sets - 1)]
    c = torch.empty(m, n, device=device, dtype=tdtype)

    for i in range(warmup):
        a, b = operands[i % sets]
        torch.mm(a, b, out=c)
    torch.cuda.synchronize(device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    # Keep the GPU busy while Python issues the timed products, so the events time the GPU's
    # work, not Python's launch rate (scalebench holds its stream with a gate likewise).
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(2e6 * (10 + 0.1 * iters)))  # ~1 ms per 2e6 cycles at H100/H200 clocks
    for i, (start, stop) in enumerate(events):
        a, b = operands[(warmup + i) % sets]
        start.record()
        torch.mm(a, b, out=c)
        stop.record()
    torch.cuda.synchronize(device)
    times = [start.elapsed_time(stop) for start, stop in events]
    median = statistics.median(times)
    del operands, c
    torch.cuda.empty_cache()
    return {
        "source": "torch.mm", "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
        "gpu": props.name, "device": device, "m": m, "n": n, "k": k, "dtype": dtype,
        "warmup": warmup, "iters": iters, "buffer_sets": sets,
        "time_ms": {"median": median, "min": min(times), "max": max(times)},
        "tflops": 2.0 * m * n * k / (median * 1e-3) / 1e12,
    }


def print_table(rows):
    print(f"{'gpu':<24} {'dtype':<5} {'M':>6} {'N':>6} {'K':>6} {'median_ms':>10} {'TFLOP/s':>9}")
    for r in rows:
        print(f"{r['gpu']:<24} {r['dtype']:<5} {r['m']:>6} {r['n']:>6} {r['k']:>6} "
              f"{r['time_ms']['median']:>10.4f} {r['tflops']:>9.1f}")


def compare(path, device_override):
    latest = {}  # (rank, m, n, k, dtype) -> the last scalebench record
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                print(f"{path}:{line_no}: skipped an unparseable line", file=sys.stderr)
                continue
            if r.get("subcommand") != "gemm":
                continue
            latest[(r.get("rank", 0), r["m"], r["n"], r["k"], r["dtype"])] = r
    if not latest:
        raise SystemExit(f"{path}: no gemm records")
    visible = torch.cuda.device_count()
    print(f"{'rank':>4} {'gpu':<24} {'dtype':<5} {'M':>6} {'N':>6} {'K':>6} {'sb_ms':>9} {'torch_ms':>9} "
          f"{'sb_TF/s':>8} {'torch_TF/s':>10} {'sb/torch':>8}")
    results = []
    for (rank, m, n, k, dtype), r in sorted(latest.items()):
        device = device_override if device_override is not None else r.get("device", 0)
        if device >= visible:
            print(f"rank {rank}: device {device} not visible here; skipped", file=sys.stderr)
            continue
        t = time_mm(m, n, k, dtype, r.get("warmup", 5), r.get("iters", 50), device)
        ratio = r["tflops"] / t["tflops"]
        print(f"{rank:>4} {r['gpu']['name']:<24} {dtype:<5} {m:>6} {n:>6} {k:>6} {r['time_ms']['median']:>9.4f} "
              f"{t['time_ms']['median']:>9.4f} {r['tflops']:>8.1f} {t['tflops']:>10.1f} {ratio:>8.3f}")
        results.append({"rank": rank, "m": m, "n": n, "k": k, "dtype": dtype, "scalebench_tflops": r["tflops"],
                        "torch_tflops": t["tflops"], "ratio": ratio})
    if results:
        geo = math.exp(sum(math.log(x["ratio"]) for x in results) / len(results))
        print(f"geometric mean of scalebench/torch TFLOP/s over {len(results)} case(s): {geo:.3f}")
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", action="append", default=[], help="MxNxK or N; repeatable, comma lists")
    p.add_argument("--dtype", action="append", default=[], help="fp16, bf16, fp32, tf32; comma lists")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--device", type=int, default=None, help="CUDA device (default 0; in --compare, the record's)")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    p.add_argument("--compare", metavar="JSONL", help="scalebench gemm results to compare against torch.mm")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_mm.py: no CUDA device visible to torch")
    if args.iters < 1 or args.warmup < 0:
        raise SystemExit("--iters must be >= 1 and --warmup >= 0")
    if args.compare:
        compare(args.compare, args.device)
        return
    sizes = [s for item in args.size for s in item.split(",") if s]
    dtypes = [d for item in args.dtype for d in item.split(",") if d]
    rows = [time_mm(m, n, k, d, args.warmup, args.iters, args.device or 0) for (m, n, k, d) in cases_from(sizes, dtypes)]
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print_table(rows)


if __name__ == "__main__":
    main()
