#!/usr/bin/env python3
"""PyTorch DDP peer of `mpirun -np N scalebench train --scaling 1,2,4,...`.

One torchrun launch of N processes (one a GPU) measures every workload at every world size of
the scaling list, as one scalebench launch does: for each world size n the first n ranks train
under DistributedDataParallel on a process group of their own while the others wait (weak
scaling: the batch is per rank). The models are those of the single-GPU peers, imported, not
copied: bench_bert_torch.build_model (Hugging Face BertForMaskedLM / GPT2LMHeadModel),
bench_resnet_torch.resnet (torchvision's ResNet-50 written out), and an MLP of
configs/mlp-large.yaml's shape defined here (no single-GPU peer has one). Training as the presets
train: bf16 autocast, fp32 parameters and gradients (so DDP all-reduces fp32, as scalebench with
grad_dtype fp32), the presets' optimizers (fused AdamW on CUDA; SGD with momentum for the ResNet),
DDP's defaults but bucket_cap_mb (25, as scalebench's bucket_mb).

Per world size: warm-up steps, then every measured step between two CUDA events (the steady clock
on the CPU); a step's time is the slowest rank's, as scalebench's; median/min/max. Then the same
number of steps under DDP's no_sync() (no gradient all-reduce, the same kernels otherwise). The
communication figures carry scalebench's names and definitions (docs/measurement.md):
comm_cost_ms = median step - median no_sync step (no_comm_step_ms), the time the all-reduce adds to
a step; allreduce_ms, the gradients all-reduced alone in buckets of bucket_cap_mb (the median of
10); hidden_fraction = 1 - comm_cost_ms / allreduce_ms, the share of the all-reduce the backward
hides. Spreads are half the p10..p90 range over the steps (comm_cost_spread_ms adds the step's and
the no_sync step's in quadrature), as scalebench's. DDP waits for the last bucket inside
backward(), so its records have no exposed tail and no backward slowdown (null).
--share-gpu: several ranks on one GPU (round-robin over the visible ones), each with its own NCCL
host identity (NCCL_HOSTID, and NCCL_SOCKET_IFNAME=lo when unset and all ranks are on one host)
and NCCL_BUFFSIZE 16 MiB with 4 socket threads of 4 sockets when unset, as scalebench's --share-gpu; records say "shared_gpu": true
and keep the NCCL settings in environment.tuning_variables.
samples/s = global batch / median step; scaling_efficiency = samples/s(n) / (n * samples/s(1)).
Rank 0 appends one JSON line per (workload, world size) to --out and prints a table. Starting the
ranks, the timing and the environment record are peer_harness.py's, which fsdp_bench.py shares.

  python3 -m torch.distributed.run --standalone --nproc_per_node 8 tests/reference/ddp_bench.py \\
      --workload mlp-large:1024 --workload bert-base:32 --workload resnet50:256 --scaling 1,2,4,8 --out ddp.jsonl
  # CPU (gloo), tiny models: --device cpu --precision fp32 --workload mlp-ci:32 --workload resnet-ci:8
"""
import argparse
import contextlib
import gc
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_bert_torch  # noqa: E402  (the transformer peers' models and optimizer settings)
import bench_resnet_torch  # noqa: E402  (the ResNet peer's model)
from peer_harness import (Timer, append_record, rank_mean, slowest, spread, start_ranks,  # noqa: E402
                          summary, timed_steps)

# The MLPs of configs/mlp-large.yaml and configs/ci-small.yaml: input, hidden widths, classes;
# Linear layers with biases, ReLU between them, cross-entropy (scalebench's models/mlp.h).
MLPS = {
    "mlp-large": (8192, [8192] * 8, 1024),
    "mlp-ci": (64, [128, 128], 10),
}
MLP_OPTIMIZER = dict(lr=3e-4, weight_decay=0.01)  # configs/mlp-large.yaml (betas, eps: AdamW's defaults)
# configs/resnet50.yaml's SGD, and the ResNets' shapes (resnet-ci: configs/ci-resnet.yaml).
RESNET_OPTIMIZER = dict(lr=0.256, momentum=0.875, weight_decay=1.0 / 32768)
RESNETS = {
    "resnet50": dict(blocks=(3, 4, 6, 3), width=64, num_classes=1000, image_size=224),
    "resnet-ci": dict(blocks=(1, 1), width=8, num_classes=10, image_size=32),
}
# Parameter counts the models must have (the same figures scalebench's unit tests check).
EXPECTED_PARAMS = {"mlp-large": 545_326_080, "resnet50": 25_557_032, "bert-base": 109_514_298,
                   "bert-large": 335_174_458, "gpt2-small": 124_439_808, "gpt2-medium": 354_823_168,
                   "gpt2-large": 774_030_080, "gpt2-xl": 1_557_611_200, "gpt2-2.7b": 2_648_931_840,
                   "mlp-ci": 26_122, "resnet-ci": 9_362}
WORKLOADS = list(MLPS) + list(RESNETS) + list(bench_bert_torch.MODELS)


def parse_workload(text):
    m = re.fullmatch(r"([a-z0-9-]+):([0-9]+)", text)
    if not m or m.group(1) not in WORKLOADS or int(m.group(2)) <= 0:
        raise argparse.ArgumentTypeError(
            f"'{text}': expected WORKLOAD:BATCH with WORKLOAD one of {', '.join(WORKLOADS)} and BATCH > 0")
    return m.group(1), int(m.group(2))


def parse_scaling(text):
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': expected world sizes such as 1,2,4,8")
    if not sizes or any(s < 1 for s in sizes) or any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise argparse.ArgumentTypeError(f"'{text}': world sizes must be >= 1 and strictly increasing")
    return sizes


def default_scaling(world):
    sizes = [1]
    while sizes[-1] * 2 <= world:
        sizes.append(sizes[-1] * 2)
    return sizes if sizes[-1] == world else sizes + [world]


class Workload:
    """A model on the device, its optimizer, one fixed batch and the loss of a forward."""

    def __init__(self, name, batch, device, seed):
        import torch
        torch.manual_seed(seed)
        # Parameters created on the device where torch can (2.0 on): a 545 M-parameter MLP or
        # BERT-large is initialised in milliseconds there, in seconds on the host.
        on_device = torch.device(device) if hasattr(torch.device, "__enter__") else contextlib.nullcontext()
        with on_device:
            self._build(name, batch, device, seed)

    def _build(self, name, batch, device, seed):
        import torch
        self.name, self.batch, self.device = name, batch, device
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)
        if name in MLPS:
            inputs, hidden, classes = MLPS[name]
            widths = [inputs] + hidden
            layers = []
            for a, b in zip(widths, widths[1:]):
                layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
            layers.append(torch.nn.Linear(widths[-1], classes))
            self.model = torch.nn.Sequential(*layers).to(device)
            self.optimizer = torch.optim.AdamW(self.model.parameters(), **MLP_OPTIMIZER, **fused(device))
            x = torch.randn(batch, inputs, device=device, generator=generator)
            y = torch.randint(0, classes, (batch,), device=device, generator=generator)
            self.loss = lambda model: torch.nn.functional.cross_entropy(model(x), y)
        elif name in RESNETS:
            shape = dict(RESNETS[name])
            size = shape.pop("image_size")
            torch.backends.cudnn.benchmark = True
            self.model = bench_resnet_torch.resnet(**shape).to(device, memory_format=torch.channels_last)
            self.optimizer = torch.optim.SGD(self.model.parameters(), **RESNET_OPTIMIZER)
            x = torch.randn(batch, 3, size, size, device=device, generator=generator)
            x = x.to(memory_format=torch.channels_last)
            y = torch.randint(0, shape["num_classes"], (batch,), device=device, generator=generator)
            self.loss = lambda model: torch.nn.functional.cross_entropy(model(x), y)
        else:  # a Hugging Face transformer of the single-GPU peer (CUDA only)
            if device != "cuda":
                raise SystemExit(f"ddp_bench.py: {name} needs CUDA (bench_bert_torch builds it on the GPU)")
            self.model, config = bench_bert_torch.build_model(name)
            family = bench_bert_torch.MODELS[name][0]
            self.optimizer = torch.optim.AdamW(self.model.parameters(), **bench_bert_torch.OPTIMIZER[family],
                                               **fused(device))
            ids, labels = bench_bert_torch.make_batch(name, config, batch, generator)
            self.loss = lambda model: model(input_ids=ids, labels=labels).loss
        self.num_params = sum(p.numel() for p in self.model.parameters())
        want = EXPECTED_PARAMS.get(name)
        if want is not None and self.num_params != want:
            raise SystemExit(f"ddp_bench.py: {name} has {self.num_params} parameters, scalebench's has {want}")


def fused(device):
    return {"fused": True} if device == "cuda" else {}


def measure(work, group, args, device, local_rank):
    """Warm-up, measured steps and no_sync steps of one workload on the ranks of `group`; the
    slowest rank's time per step."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = DDP(work.model, device_ids=[local_rank] if device == "cuda" else None, process_group=group,
              bucket_cap_mb=args.bucket_cap_mb)

    def autocast():
        return torch.autocast(device, dtype=torch.bfloat16) if args.precision == "bf16" else contextlib.nullcontext()

    def step(sync=True):
        with contextlib.nullcontext() if sync else ddp.no_sync():
            with autocast():
                loss = work.loss(ddp)
            loss.backward()
        work.optimizer.step()
        work.optimizer.zero_grad(set_to_none=True)
        return loss

    synced, unsynced, losses = timed_steps(step, args.warmup, args.steps, device)
    times = slowest(synced + unsynced, group, device)
    losses = rank_mean(losses, group, device)
    gradient_bytes = sum(p.numel() * p.element_size() for p in work.model.parameters() if p.requires_grad)
    del ddp
    allreduce_ms = time_allreduce(work.model, group, args.bucket_cap_mb, device)
    return times[:args.steps], times[args.steps:], losses, gradient_bytes, allreduce_ms


def time_allreduce(model, group, bucket_cap_mb, device, repeats=10):
    """The model's fp32 gradients all-reduced alone, bucket by bucket (DDP's bucket size), the
    slowest rank's time in ms per repeat: what the step would wait for with nothing to hide it."""
    import torch
    import torch.distributed as dist
    count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    flat = torch.zeros(count, dtype=torch.float32, device=device)
    per_bucket = max(1, int(bucket_cap_mb * 2**20) // 4)
    timer = Timer(device)

    def all_buckets():
        for start in range(0, count, per_bucket):
            dist.all_reduce(flat[start:start + per_bucket], group=group)

    dist.barrier(group=group)
    return slowest(timer.run(all_buckets, repeats), group, device)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Not --run: torchrun's parser would take it for an abbreviation of its own --run-path.
    ap.add_argument("--workload", action="append", type=parse_workload, required=True, metavar="WORKLOAD:BATCH",
                    help=f"a workload and its batch per rank (repeatable): {', '.join(WORKLOADS)}")
    ap.add_argument("--scaling", type=parse_scaling,
                    help="world sizes, e.g. 1,2,4,8 (default: 1, 2, 4, ... up to the launched world, and it)")
    ap.add_argument("--steps", type=int, default=20, help="measured steps per world size (and as many no_sync steps)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps per world size")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="bf16 autocast or plain fp32")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cuda (NCCL) or cpu (gloo)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", required=True, help="JSONL file rank 0 appends the records to")
    ap.add_argument("--share-gpu", action="store_true",
                    help="several ranks on one GPU, each its own NCCL host identity (not hardware figures)")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 1:
        ap.error("--steps and --warmup must be >= 1")
    if not args.bucket_cap_mb > 0:
        ap.error("--bucket-cap-mb must be > 0")
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        ap.error("run under torchrun (python3 -m torch.distributed.run --nproc_per_node N ...): RANK and WORLD_SIZE unset")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    scaling = args.scaling or default_scaling(world)
    if scaling[-1] > world:
        ap.error(f"--scaling {','.join(map(str, scaling))}: {scaling[-1]} exceeds the launched world size {world}")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if rank == 0 and not os.access(out_dir, os.W_OK):
        ap.error(f"--out {args.out}: cannot write to {out_dir}")

    import torch
    import torch.distributed as dist
    local_rank, groups, host_group, env = start_ranks(
        args.device, args.share_gpu, scaling, rank, world, local_rank,
        "ddp_bench.py: no CUDA GPU visible (use --device cpu for gloo on the CPU)")
    if rank == 0:
        print(f"ddp_bench: torch {env['torch']}, {env.get('gpu', 'CPU')}, {world} ranks launched; world sizes "
              f"{','.join(map(str, scaling))}; {args.warmup} warm-up + {args.steps} measured + {args.steps} "
              f"no_sync steps; bucket_cap_mb {args.bucket_cap_mb:g}, {args.precision}", flush=True)
        print(f"{'workload':<12} {'batch':>5} {'ranks':>5} {'samples/s':>11} {'step ms':>9} {'no_sync ms':>10} "
              f"{'comm cost':>9} {'±':>7} {'allreduce':>9} {'hidden':>7} {'eff.':>7}", flush=True)
    for name, batch in args.workload:
        samples_at_1, relative_at_1 = None, 0.0
        for n in scaling:
            record = None
            if rank < n:
                work = Workload(name, batch, args.device, args.seed)
                synced, unsynced, losses, gradient_bytes, allreduce_ms = measure(work, groups[n], args, args.device,
                                                                                 local_rank)
                step, nosync, alone = summary(synced), summary(unsynced), summary(allreduce_ms)
                samples_per_s = n * batch / (step["median"] / 1e3)
                relative = spread(step) / step["median"]
                comm_cost = step["median"] - nosync["median"] if n > 1 else None
                if n == 1:
                    samples_at_1, relative_at_1 = samples_per_s, relative
                efficiency = samples_per_s / (n * samples_at_1) if samples_at_1 else None
                record = {
                    "schema": "scalebench-ddp-peer/1", "tool": "torch-ddp", "workload": name,
                    "world_size": n, "launched_world_size": world, "local_batch": batch, "global_batch": n * batch,
                    "precision": f"{args.precision}-autocast" if args.precision == "bf16" else "fp32",
                    "bucket_cap_mb": args.bucket_cap_mb, "warmup_steps": args.warmup, "measured_steps": args.steps,
                    "num_params": work.num_params, "gradient_bytes": gradient_bytes,
                    "step_ms": step, "step_spread_ms": spread(step), "no_comm_step_ms": nosync,
                    "comm_cost_ms": comm_cost,
                    "comm_cost_spread_ms": math.hypot(spread(step), spread(nosync)) if n > 1 else None,
                    "allreduce_ms": alone["median"], "allreduce_spread_ms": spread(alone),
                    "hidden_fraction": (1 - comm_cost / alone["median"]
                                        if n > 1 and alone["median"] > 0 else None),
                    "exposed_comm_ms": None, "compute_slowdown_ms": None,
                    "shared_gpu": args.share_gpu,
                    "samples_per_s": samples_per_s, "samples_per_s_spread": samples_per_s * relative,
                    "samples_per_s_per_rank": samples_per_s / n,
                    "scaling_efficiency": efficiency,
                    "scaling_efficiency_spread": efficiency * math.hypot(relative, relative_at_1)
                    if efficiency is not None else None,
                    "speedup": samples_per_s / samples_at_1 if samples_at_1 else None,
                    "initial_loss": losses[0], "final_loss": losses[1],
                    "step_ms_all": synced, "no_comm_step_ms_all": unsynced, "allreduce_ms_all": allreduce_ms,
                    "environment": env,
                }
                del work
                gc.collect()
                if args.device == "cuda":
                    torch.cuda.empty_cache()
            dist.barrier(group=host_group)
            if rank == 0:
                eff = record["scaling_efficiency"]
                eff = f"{100 * eff:.1f}%" if eff is not None else "-"
                hidden = record["hidden_fraction"]
                hidden = f"{100 * hidden:.1f}%" if hidden is not None else "-"
                cost, cost_spread = record["comm_cost_ms"], record["comm_cost_spread_ms"]
                cost = f"{cost:.3f}" if cost is not None else "-"
                cost_spread = f"{cost_spread:.3f}" if cost_spread is not None else "-"
                print(f"{name:<12} {batch:>5} {n:>5} {record['samples_per_s']:>11.1f} {record['step_ms']['median']:>9.3f} "
                      f"{record['no_comm_step_ms']['median']:>10.3f} {cost:>9} {cost_spread:>7} "
                      f"{record['allreduce_ms']:>9.3f} {hidden:>7} {eff:>7}", flush=True)
                append_record(args.out, record)
    dist.barrier(group=host_group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
