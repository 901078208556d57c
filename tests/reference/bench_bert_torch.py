#!/usr/bin/env python3
"""PyTorch peer of scalebench's transformer training benchmarks.

Hugging Face transformers' BertForMaskedLM (BertConfig() = bert-base, or bert-large's sizes)
and GPT2LMHeadModel (GPT2Config() = gpt2-small, or gpt2-medium's sizes), built from configs in
code (no download), trained the way scalebench's presets (configs/*.yaml) train them: bf16
autocast, fused AdamW with the presets' settings, dropout 0.1 (the configs' default), random
token ids, BERT with masked-LM labels on 15% of the positions (-100 elsewhere), GPT-2 with
next-token labels.
Eager and torch.compile (mode "default"). Each run: warm-up steps (the first one of a compiled
model includes its compile time, reported apart), then every measured step between two CUDA
events; median/min/max ms, samples/s = batch / median.

  python3 tests/reference/bench_bert_torch.py                       # the default runs
  python3 tests/reference/bench_bert_torch.py --run bert-base:eager:32 --run bert-base:compile:256 \\
      --steps 20 --warmup 5 --out torch.jsonl
  python3 tests/reference/bench_bert_torch.py --table OUTDIR        # scalebench beside torch

--table reads OUTDIR/torch.jsonl and OUTDIR/scalebench_<model>_b<batch>.jsonl (what
launch/bench_transformer.sh writes) and prints one row per model and batch: scalebench
samples/s, torch eager and compiled samples/s, and the ratios.
"""
import argparse
import datetime
import glob
import json
import os
import re
import statistics
import time

# model name -> (family, sequence length, config overrides of the family's defaults)
MODELS = {
    "bert-base": ("bert", 128, {}),
    "bert-large": ("bert", 128, dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                     intermediate_size=4096)),
    "gpt2-small": ("gpt2", 1024, {}),
    "gpt2-medium": ("gpt2", 1024, dict(n_embd=1024, n_layer=24, n_head=16)),
    "gpt2-large": ("gpt2", 1024, dict(n_embd=1280, n_layer=36, n_head=20)),
    "gpt2-xl": ("gpt2", 1024, dict(n_embd=1600, n_layer=48, n_head=25)),
    "gpt2-2.7b": ("gpt2", 1024, dict(n_embd=2560, n_layer=32, n_head=40)),
}
# AdamW settings of the presets in configs/ (the same for every size of a family).
OPTIMIZER = {
    "bert": dict(lr=1e-4, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-6),
    "gpt2": dict(lr=6e-4, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8),
}
# The comparisons the docs quote: small batch against eager (launch-bound), large batch against compile.
DEFAULT_RUNS = ["bert-base:eager:32", "bert-base:eager:256", "bert-base:compile:256",
                "bert-large:eager:32", "bert-large:eager:256", "bert-large:compile:256",
                "gpt2-small:eager:8", "gpt2-small:eager:32", "gpt2-small:compile:32"]
MLM_FRACTION = 0.15


def parse_run(text):
    m = re.fullmatch(r"([a-z0-9-]+):(eager|compile):([0-9]+)", text)
    if not m or m.group(1) not in MODELS or int(m.group(3)) <= 0:
        raise SystemExit(f"--run '{text}': expected MODEL:eager|compile:BATCH with MODEL one of {', '.join(MODELS)}")
    return m.group(1), m.group(2), int(m.group(3))


def build_model(name):
    import torch
    import transformers
    family, _, overrides = MODELS[name]
    if family == "bert":
        config = transformers.BertConfig(**overrides)
        model = transformers.BertForMaskedLM(config)
    else:
        config = transformers.GPT2Config(**overrides)
        model = transformers.GPT2LMHeadModel(config)
    return model.to("cuda").train(), config


def make_batch(name, config, batch, generator):
    import torch
    family, seq, _ = MODELS[name]
    ids = torch.randint(0, config.vocab_size, (batch, seq), device="cuda", generator=generator)
    if family == "gpt2":
        return ids, ids.clone()  # the model shifts the labels itself
    labelled = torch.rand((batch, seq), device="cuda", generator=generator) < MLM_FRACTION
    labels = torch.where(labelled, ids, torch.full_like(ids, -100))
    return ids, labels


def run_one(name, mode, batch, steps, warmup):
    import torch
    torch.manual_seed(1234)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(1234)
    model, config = build_model(name)
    num_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), fused=True, **OPTIMIZER[MODELS[name][0]])
    step_model = torch.compile(model, mode="default") if mode == "compile" else model
    ids, labels = make_batch(name, config, batch, generator)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    first_loss = step().item()  # includes the compile for mode == compile
    first_step_s = time.perf_counter() - t0
    for _ in range(max(warmup - 1, 0)):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)]
    for start, end in events:
        start.record()
        loss = step()
        end.record()
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in events]
    median = statistics.median(ms)
    seq = MODELS[name][1]
    return {
        "num_params": num_params,
        "attn_implementation": getattr(config, "_attn_implementation", None),
        "step_ms": {"median": median, "min": min(ms), "max": max(ms), "all": ms},
        "samples_per_s": batch / (median / 1000.0),
        "tokens_per_s": batch * seq / (median / 1000.0),
        "first_step_s": first_step_s,
        "initial_loss": first_loss,
        "final_loss": loss.item(),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def environment():
    import torch
    import transformers
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "host": os.uname().nodename,
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def bench(args):
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("bench_bert_torch.py: no CUDA GPU visible")
    env = environment()
    runs = [parse_run(r) for r in (args.run or DEFAULT_RUNS)]
    print(f"torch {env['torch']}, transformers {env['transformers']}, {env['gpu']}; "
          f"{args.warmup} warm-up + {args.steps} measured steps per run", flush=True)
    print(f"{'model':<12} {'mode':<8} {'batch':>5} {'median ms':>10} {'samples/s':>10} {'tokens/s':>11} "
          f"{'first step s':>12} {'peak GiB':>9}", flush=True)
    out = open(args.out, "a") if args.out else None
    for name, mode, batch in runs:
        record = {"schema": "scalebench-torch-peer/1", "model": name, "mode": mode, "batch": batch,
                  "seq": MODELS[name][1], "precision": "bf16-autocast", "optimizer": "adamw-fused",
                  "warmup_steps": args.warmup, "measured_steps": args.steps, **env}
        try:
            record.update(run_one(name, mode, batch, args.steps, args.warmup))
            print(f"{name:<12} {mode:<8} {batch:>5} {record['step_ms']['median']:>10.2f} "
                  f"{record['samples_per_s']:>10.1f} {record['tokens_per_s']:>11.0f} "
                  f"{record['first_step_s']:>12.1f} {record['peak_memory_gib']:>9.1f}", flush=True)
        except Exception as e:  # one failing run (out of memory, a compile error) must not stop the rest
            first = (str(e).splitlines() or [""])[0]
            record["error"] = f"{type(e).__name__}: {first}"
            print(f"{name:<12} {mode:<8} {batch:>5} failed: {record['error'][:100]}", flush=True)
        if out:
            out.write(json.dumps(record) + "\n")
            out.flush()
        torch._dynamo.reset()
        torch.cuda.empty_cache()


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def table(outdir):
    torch_rows = {}
    torch_path = os.path.join(outdir, "torch.jsonl")
    if os.path.exists(torch_path):
        for r in read_jsonl(torch_path):
            torch_rows[(r["model"], r["batch"], r["mode"])] = r
    sb_rows = {}
    for path in glob.glob(os.path.join(outdir, "scalebench_*_b*.jsonl")):
        m = re.fullmatch(r"scalebench_(.+)_b([0-9]+)\.jsonl", os.path.basename(path))
        recs = [r for r in read_jsonl(path) if r.get("subcommand") == "train" and r.get("world_size") == 1] if m else []
        if recs:
            sb_rows[(m.group(1), int(m.group(2)))] = recs[-1]
    keys = sorted({(k[0], k[1]) for k in torch_rows} | set(sb_rows),
                  key=lambda k: (list(MODELS).index(k[0]) if k[0] in MODELS else 99, k[1]))

    def sps(r):
        return r.get("samples_per_s") if r and "error" not in r else None

    def fmt(x, spec):
        return format(x, spec) if x is not None else "-"

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "-"

    gpu = next((r["gpu"] for r in torch_rows.values()), "?")
    print(f"samples/s, bf16, one GPU ({gpu}); ratio = scalebench / torch")
    print("| model | batch | scalebench | MFU | torch eager | torch.compile | vs eager | vs compile |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for model, batch in keys:
        sb = sb_rows.get((model, batch))
        eager, comp = sps(torch_rows.get((model, batch, "eager"))), sps(torch_rows.get((model, batch, "compile")))
        s = sps(sb)
        mfu = sb.get("mfu") if sb else None
        print(f"| {model} | {batch} | {fmt(s, '.1f')} | {fmt(mfu * 100 if mfu is not None else None, '.1f')}"
              f"{'%' if mfu is not None else ''} | {fmt(eager, '.1f')} | {fmt(comp, '.1f')} | "
              f"{ratio(s, eager)} | {ratio(s, comp)} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", action="append", help="MODEL:eager|compile:BATCH (repeatable; default: DEFAULT_RUNS)")
    p.add_argument("--steps", type=int, default=20, help="measured steps per run")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps per run (the first compiles)")
    p.add_argument("--out", help="JSONL file the records are appended to")
    p.add_argument("--table", metavar="OUTDIR", help="print scalebench beside torch from OUTDIR and exit")
    args = p.parse_args()
    if args.table:
        table(args.table)
        return
    if args.steps < 1 or args.warmup < 1:
        raise SystemExit("--steps and --warmup must be >= 1")
    bench(args)


if __name__ == "__main__":
    main()
