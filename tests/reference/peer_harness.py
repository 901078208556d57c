"""What the torchrun peers of scalebench (ddp_bench.py, fsdp_bench.py) share: starting the ranks and
their process groups, the environment a record keeps, the shared-GPU settings, timing steps with and
without the gradient reduction (the slowest rank's time per step, as scalebench's), the summary of
a list of times and its spread, and appending a record. Each peer says only how it wraps the model.
"""
import datetime
import json
import os
import statistics
import time


def environment(device):
    import socket
    import torch
    env = {"torch": torch.__version__, "host": socket.gethostname(), "device": device,
           "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           # the settings scalebench's records keep too (src/system/environment.cpp)
           "tuning_variables": {k: v for k, v in os.environ.items()
                                if k.startswith("NCCL_") or k == "CUDA_MPS_PIPE_DIRECTORY"}}
    if device == "cuda":
        nccl = torch.cuda.nccl.version()  # a tuple, or one int in older releases
        env.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(),
                   nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl))
    return env


def percentile(values, q):
    """Linear interpolation between order statistics (numpy's default), as scalebench's stats.h."""
    v = sorted(values)
    at = (len(v) - 1) * q / 100.0
    lo = int(at)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (at - lo)


def summary(times):
    return {"median": statistics.median(times), "min": min(times), "max": max(times),
            "p10": percentile(times, 10), "p90": percentile(times, 90), "count": len(times)}


def spread(s):
    """Half the p10..p90 range: scalebench's spread of a figure over the measured steps."""
    return 0.5 * (s["p90"] - s["p10"])


class Timer:
    """Per-step times in ms: CUDA events recorded around each step, read after the last one (the
    steps are issued back to back, as in training); on the CPU the steady clock."""

    def __init__(self, device):
        self.cuda = device == "cuda"

    def run(self, step, count):
        import torch
        if self.cuda:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]
            for start, end in events:
                start.record()
                step()
                end.record()
            torch.cuda.synchronize()
            return [s.elapsed_time(e) for s, e in events]
        times = []
        for _ in range(count):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
        return times


def timed_steps(step, warmup, steps, device):
    """`step(reduce)` trains one step (reduce=False: without the gradient reduction, DDP's no_sync)
    and returns its loss. Runs `warmup` steps, `steps` measured steps, then as many without the
    reduction; returns this rank's times in ms of both and [the first step's loss, the last
    measured step's]."""
    last_loss = [None]

    def run(reduce=True):
        last_loss[0] = step(reduce)

    run()
    initial_loss = float(last_loss[0])
    for _ in range(warmup - 1):
        run()
    timer = Timer(device)
    reduced = timer.run(run, steps)
    final_loss = float(last_loss[0])
    unreduced = timer.run(lambda: run(False), steps)
    return reduced, unreduced, [initial_loss, final_loss]


def slowest(values, group, device):
    """Each value's maximum over the ranks of `group`: a step ends when its last rank is done."""
    import torch
    import torch.distributed as dist
    values = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX, group=group)
    return values.tolist()


def rank_mean(values, group, device):
    """Each value's mean over the ranks of `group`."""
    import torch
    import torch.distributed as dist
    values = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(values, group=group)
    return (values / dist.get_world_size(group)).tolist()


def share_gpu_environment(rank, world):
    """Each rank its own NCCL host and the mode's NCCL buffer size, as scalebench's
    enable_shared_gpu (src/system/backend.h), so both peers run on the same fabric settings."""
    import socket
    os.environ["NCCL_HOSTID"] = f"{os.environ.get('NCCL_HOSTID') or socket.gethostname()}-rank{rank}"
    one_host = int(os.environ.get("LOCAL_WORLD_SIZE", world)) == world
    if one_host and not os.environ.get("NCCL_SOCKET_IFNAME"):
        os.environ["NCCL_SOCKET_IFNAME"] = "lo"
    for name, value in (("NCCL_BUFFSIZE", str(16 << 20)), ("NCCL_SOCKET_NTHREADS", "4"),
                        ("NCCL_NSOCKS_PERTHREAD", "4"), ("NCCL_RUNTIME_CONNECT", "0")):  # kSharedGpuNcclDefaults
        if not os.environ.get(name):
            os.environ[name] = value


def start_ranks(device, share_gpu, scaling, rank, world, local_rank, no_gpu):
    """The process group (NCCL on CUDA, gloo on the CPU; `no_gpu` is the message when CUDA has no
    GPU), one group of the first n ranks per world size n of `scaling` (every rank creates every
    group, in the same order), a gloo group of all ranks for the idle ones to wait on, and the
    environment a record keeps. Returns (local_rank, groups, host_group, environment)."""
    import torch
    import torch.distributed as dist
    if device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(no_gpu)
        if share_gpu:
            local_rank %= torch.cuda.device_count()
            share_gpu_environment(rank, world)
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl" if device == "cuda" else "gloo")
    groups = {n: dist.new_group(list(range(n))) for n in scaling}
    host_group = dist.new_group(backend="gloo")
    return local_rank, groups, host_group, environment(device)


def append_record(path, record):
    """One JSON line appended to `path` (rank 0 writes the records)."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
