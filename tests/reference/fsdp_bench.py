#!/usr/bin/env python3
"""PyTorch peer of `scalebench train --sharding MODE`: the same model, batch and precision, each
scalebench mode against the PyTorch setting that shards the same state.

  none       DistributedDataParallel (the all-reduce), as ddp_bench.py
  optimizer  DDP with torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO-1: the optimizer state
             sharded, the updated parameters broadcast back)
  gradients  FSDP2 fully_shard(reshard_after_forward=False) (FSDP's SHARD_GRAD_OP, ZeRO-2)
  parameters FSDP2 fully_shard(reshard_after_forward=True) (FSDP's FULL_SHARD, ZeRO-3)

FSDP2 shards each transformer block (GPT2Block, BertLayer) and then the root, with
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): bf16 compute from fp32 sharded
parameters, gradients reduce-scattered in fp32 and bf16 parameters gathered, as scalebench's sharded
modes in bf16 do (the records name each side's bytes). DDP modes run under
bf16 autocast, as ddp_bench.py. The models and the batch are ddp_bench.py's (imported); starting the
ranks and the timing are peer_harness.py's, as ddp_bench.py's.

Per (workload, mode, world size): warm-up, measured steps (CUDA events, the slowest rank's per
step), then as many steps without the gradient reduction (DDP's no_sync(); FSDP2's
set_requires_gradient_sync(False), which keeps the all-gathers): comm_cost_ms = median step -
median step without the reduction. Memory per rank: torch.cuda.max_memory_allocated() from the
sharded model on, over the steps (the caching allocator's high-water mark of this process; the
unsharded model built before fully_shard is not in it), the largest rank's. --share-gpu as ddp_bench.py. Rank 0 appends one JSON line per row to --out.

  python3 -m torch.distributed.run --standalone --nproc_per_node 4 tests/reference/fsdp_bench.py \\
      --share-gpu --workload gpt2-xl:2 --mode none --mode optimizer --mode gradients --scaling 2,4 --out fsdp.jsonl
"""
import argparse
import contextlib
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_bench  # noqa: E402  (the workloads and their flags)
from peer_harness import append_record, rank_mean, slowest, start_ranks, summary, timed_steps  # noqa: E402

MODES = ["none", "optimizer", "gradients", "parameters"]


def fsdp_api():
    """fully_shard and MixedPrecisionPolicy: public from torch 2.6, under _composable before."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


def blocks_of(model):
    """The units FSDP2 shards one by one: the transformer blocks."""
    import torch
    names = ("GPT2Block", "BertLayer")
    return [m for m in model.modules() if type(m).__name__ in names] or [
        m for m in model.modules() if isinstance(m, torch.nn.Sequential)][:1]


def wrap(name, work, mode, group, local_rank, bucket_cap_mb):
    """The model and optimizer of `mode`; returns (model to call, no-reduction context maker)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    family = ddp_bench.bench_bert_torch.MODELS[name][0]
    params = dict(ddp_bench.bench_bert_torch.OPTIMIZER[family])
    if mode in ("none", "optimizer"):
        ddp = DDP(work.model, device_ids=[local_rank], process_group=group, bucket_cap_mb=bucket_cap_mb)
        if mode == "optimizer":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            work.optimizer = ZeroRedundancyOptimizer(work.model.parameters(), optimizer_class=torch.optim.AdamW,
                                                     process_group=group, **params)
        return ddp, ddp.no_sync
    fully_shard, MixedPrecisionPolicy = fsdp_api()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    reshard = mode == "parameters"
    from torch.distributed.device_mesh import DeviceMesh
    mesh = DeviceMesh.from_group(group, "cuda")
    for block in blocks_of(work.model):
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(work.model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    work.optimizer = torch.optim.AdamW(work.model.parameters(), foreach=True, **params)

    @contextlib.contextmanager
    def no_reduce():
        work.model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            work.model.set_requires_gradient_sync(True)
    return work.model, no_reduce


def measure(name, batch, mode, group, args, local_rank):
    import torch
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    work = ddp_bench.Workload(name, batch, "cuda", args.seed)
    model, no_reduce = wrap(name, work, mode, group, local_rank, args.bucket_cap_mb)
    torch.cuda.reset_peak_memory_stats()  # after sharding: not the unsharded model built before it
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if mode in ("none", "optimizer") else None

    def step(reduce=True):
        with contextlib.nullcontext() if reduce else no_reduce():
            with autocast or contextlib.nullcontext():
                loss = work.loss(model)
            loss.backward()
        work.optimizer.step()
        work.optimizer.zero_grad(set_to_none=True)
        return loss

    reduced, unreduced, losses = timed_steps(step, args.warmup, args.steps, "cuda")
    peak = float(torch.cuda.max_memory_allocated())
    figures = slowest(reduced + unreduced + [peak], group, "cuda")
    losses = rank_mean(losses, group, "cuda")
    num_params = work.num_params
    del model, work
    gc.collect()
    return figures[:args.steps], figures[args.steps:2 * args.steps], figures[-1], losses, num_params


def gathered_bytes(mode, num_params):
    """Bytes of one step's parameter gather (nccl-tests' size) and gradient reduction."""
    if mode == "none":
        return 0, 4 * num_params  # the all-reduce of fp32 gradients
    gather = 2 * num_params if mode in ("gradients", "parameters") else 4 * num_params  # bf16, or fp32 broadcasts
    if mode == "parameters":
        gather *= 2  # before the forward and again before the backward
    return gather, 4 * num_params


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", action="append", type=ddp_bench.parse_workload, required=True,
                    metavar="WORKLOAD:BATCH", help="a transformer workload and its batch per rank (repeatable)")
    ap.add_argument("--mode", action="append", choices=MODES, help="sharding modes (repeatable; default all)")
    ap.add_argument("--scaling", type=ddp_bench.parse_scaling, help="world sizes, e.g. 2,4 (default: the launched)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (modes none, optimizer)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", required=True)
    ap.add_argument("--share-gpu", action="store_true", help="several ranks on one GPU (not hardware figures)")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 1:
        ap.error("--steps and --warmup must be >= 1")
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        ap.error("run under torchrun (python3 -m torch.distributed.run --nproc_per_node N ...)")
    for name, _ in args.workload:
        if name not in ddp_bench.bench_bert_torch.MODELS:
            ap.error(f"--workload {name}: FSDP2 wraps transformer blocks; one of "
                     f"{', '.join(ddp_bench.bench_bert_torch.MODELS)}")
    modes = args.mode or MODES
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    scaling = args.scaling or [world]
    if scaling[-1] > world:
        ap.error(f"--scaling: {scaling[-1]} exceeds the launched world size {world}")

    import torch
    import torch.distributed as dist
    local_rank, groups, host_group, env = start_ranks("cuda", args.share_gpu, scaling, rank, world, local_rank,
                                                      "fsdp_bench.py: no CUDA GPU visible")
    if rank == 0:
        print(f"fsdp_bench: torch {env['torch']}, {env.get('gpu')}, {world} ranks; modes {','.join(modes)}; "
              f"{args.warmup} warm-up + {args.steps} measured + {args.steps} steps without the reduction", flush=True)
        print(f"{'workload':<11} {'batch':>5} {'mode':<10} {'ranks':>5} {'step ms':>9} {'no-red. ms':>10} "
              f"{'comm ms':>8} {'peak GiB':>9}", flush=True)
    for name, batch in args.workload:
        for mode in modes:
            for n in scaling:
                record = None
                if rank < n:
                    reduced, unreduced, peak, losses, num_params = measure(name, batch, mode, groups[n], args,
                                                                           local_rank)
                    step, no_reduce = summary(reduced), summary(unreduced)
                    gather, reduce = gathered_bytes(mode, num_params)
                    record = {
                        "schema": "scalebench-fsdp-peer/1", "workload": name, "sharding": mode,
                        "tool": {"none": "torch-ddp", "optimizer": "torch-ddp+zero-redundancy-optimizer",
                                 "gradients": "torch-fsdp2-reshard-false", "parameters": "torch-fsdp2-reshard-true"}[mode],
                        "world_size": n, "launched_world_size": world, "local_batch": batch, "global_batch": n * batch,
                        "precision": "bf16-autocast" if mode in ("none", "optimizer") else "bf16-fsdp-mixed-precision",
                        "num_params": num_params, "warmup_steps": args.warmup, "measured_steps": args.steps,
                        "step_ms": step, "no_reduction_step_ms": no_reduce,
                        "comm_cost_ms": step["median"] - no_reduce["median"],
                        "gather_bytes_per_step": gather, "reduce_bytes_per_step": reduce,
                        "peak_memory_bytes": peak, "shared_gpu": args.share_gpu,
                        "samples_per_s": n * batch / (step["median"] / 1e3),
                        "initial_loss": losses[0], "final_loss": losses[1], "environment": env,
                    }
                    torch.cuda.empty_cache()
                dist.barrier(group=host_group)
                if rank == 0:
                    print(f"{name:<11} {batch:>5} {mode:<10} {n:>5} {record['step_ms']['median']:>9.2f} "
                          f"{record['no_reduction_step_ms']['median']:>10.2f} {record['comm_cost_ms']:>8.2f} "
                          f"{record['peak_memory_bytes'] / 2**30:>9.2f}", flush=True)
                    append_record(args.out, record)
    dist.barrier(group=host_group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
