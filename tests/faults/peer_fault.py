#!/usr/bin/env python3
"""A peer that fails in the middle of training: SIGKILL or SIGSTOP one rank of a running
multi-rank `scalebench train`, or make its CUDA work fail (CUDA: the test-only
SCALEBENCH_TEST_CUDA_FAULT=RANK:STEP, an illegal-address kernel fault in step --fault-step of
the world size after the first), and check what the job does (on NCCL with real or shared
GPUs, or on CPU ranks over MPI).

The command after `--` is started in a session of its own, with SCALEBENCH_COLLECTIVE_TIMEOUT_S
set. Once the records file holds its first record (the first world size of the scaling list is
done and written) and --delay-s more seconds have passed (the next world size is in its steps,
its ranks exchanging bucket all-reduces), the rank --rank is signalled; a CUDA fault counts from
the line the faulting rank prints as it injects it. Checked:
  ended       the job exits non-zero, every rank process is gone, within the bound: the collective
              timeout, the watchdog's grace (half the timeout, 1 to 10 s) and 10 s to tear down;
  named       stderr singles out the failed rank and its host: the watchdog's "rank(s) R (HOST)
              stopped answering", mpirun's "rank R with PID P on node HOST", or the failed rank's
              own "error on rank R (HOST)" or "error: rank R on HOST" (its watchdog's abort);
  records     the records written before the fault parse whole (train, checks passed) and an
              "incomplete" record of the train run comes last; no torn line;
  no crash    no rank crashed on the way out (Open MPI's "Process received signal", a
              segmentation fault, a core dump): the ranks end by the watchdog's abort, not by
              touching a communicator being torn down.
Also reported, not required: whether the error names the collective it was stuck in (all_reduce).
One JSON line per fault is appended to --report; exit 0 when every check passed, 1 otherwise,
2 on bad arguments.

  python3 tests/faults/peer_fault.py --signal STOP --rank 7 --timeout-s 10 --records R.jsonl \\
      --stderr F.err --report faults.jsonl -- mpirun -np 8 build-gpu/scalebench train ... --out R.jsonl
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

SIGNALS = {"KILL": signal.SIGKILL, "STOP": signal.SIGSTOP}
FAULTS = sorted(SIGNALS) + ["CUDA"]
CUDA_FAULT_LINE = "scalebench: test fault: rank"


def process_table():
    """pid -> (parent pid, state) for every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        table[int(name)] = (int(fields[1]), fields[0])
    return table


def descendants(root):
    table = process_table()
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in table.items():
            if ppid == parent:
                found.append(pid)
                frontier.append(pid)
    return found


def rank_of(pid):
    """The MPI world rank a process was started as (Open MPI's or PMIx's variable), or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for var in env:
        for key in (b"OMPI_COMM_WORLD_RANK=", b"PMIX_RANK="):
            if var.startswith(key):
                return int(var[len(key):])
    return None


def alive(pid):
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def read_records(path):
    """Parsed records and the lines that do not parse (a torn last line)."""
    records, torn = [], []
    if not os.path.exists(path):
        return records, torn
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                torn.append(f"{path}:{number}: not a whole JSON line")
    return records, torn


def first_record_written(path):
    """Whether the first measurement is in (the run's "start" record precedes any work)."""
    records, _ = read_records(path)
    return any(r.get("subcommand") == "train" for r in records)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--signal", choices=FAULTS, required=True,
                    help="KILL or STOP the rank, or CUDA: its CUDA work faults (SCALEBENCH_TEST_CUDA_FAULT)")
    ap.add_argument("--fault-step", type=int, default=20, help="CUDA: the step of the N-rank phase that faults")
    ap.add_argument("--rank", type=int, required=True, help="the world rank to signal (not 0: rank 0 writes the records)")
    ap.add_argument("--timeout-s", type=float, required=True, help="SCALEBENCH_COLLECTIVE_TIMEOUT_S for the job")
    ap.add_argument("--delay-s", type=float, default=3.0, help="seconds between the first record and the signal")
    ap.add_argument("--start-limit-s", type=float, default=300.0, help="longest wait for the first record")
    ap.add_argument("--records", required=True, help="the JSONL file the command appends to (its --out)")
    ap.add_argument("--stderr", required=True, help="file the command's stderr (and stdout) goes to")
    ap.add_argument("--report", required=True, help="JSONL file the outcome is appended to")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the mpirun command line")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command after --")
    if args.rank < 1:
        ap.error(f"--rank {args.rank}: signal a rank other than 0 (rank 0 writes the incomplete record)")
    if not args.timeout_s > 0:
        ap.error("--timeout-s must be > 0")
    if args.records not in command:
        ap.error(f"--records {args.records} does not appear in the command: it must be the command's --out")
    if os.path.exists(args.records):
        os.remove(args.records)

    env = dict(os.environ, SCALEBENCH_COLLECTIVE_TIMEOUT_S=f"{args.timeout_s:g}")
    if args.signal == "CUDA":
        env["SCALEBENCH_TEST_CUDA_FAULT"] = f"{args.rank}:{args.fault_step}"
    grace = min(10.0, max(1.0, args.timeout_s / 2))
    bound = args.timeout_s + grace + 10.0
    host = socket.gethostname()
    outcome = {"fault": "CUDA fault" if args.signal == "CUDA" else f"SIG{args.signal}", "rank": args.rank, "host": host, "timeout_s": args.timeout_s,
               "bound_s": bound, "command": command}
    with open(args.stderr, "w") as err:
        job = subprocess.Popen(command, stdout=err, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        started = time.monotonic()
        while job.poll() is None and not first_record_written(args.records):
            if time.monotonic() - started > args.start_limit_s:
                break
            time.sleep(0.05)
        victim, ranks = None, {}
        if job.poll() is None and first_record_written(args.records):
            if args.signal != "CUDA":
                time.sleep(args.delay_s)
            for pid in descendants(job.pid):
                r = rank_of(pid)
                # A rank's own children (a shell, a helper) inherit its variable: keep the first found.
                if r is not None and r not in ranks:
                    ranks[r] = pid
            victim = ranks.get(args.rank)
        outcome["rank_pids"] = {str(r): p for r, p in sorted(ranks.items())}
        if victim is None:
            outcome["error"] = ("the job ended before its first record" if job.poll() is not None else
                                f"no first record within {args.start_limit_s:g} s, or rank {args.rank} not found "
                                f"among the job's processes (ranks found: {sorted(ranks)})")
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        else:
            records_before = len(read_records(args.records)[0])
            if args.signal == "CUDA":  # from the moment the rank injects it
                while job.poll() is None and CUDA_FAULT_LINE not in open(args.stderr, errors="replace").read():
                    if time.monotonic() - started > args.start_limit_s:
                        break
                    time.sleep(0.01)
                outcome["fault_injected"] = CUDA_FAULT_LINE in open(args.stderr, errors="replace").read()
            else:
                os.kill(victim, SIGNALS[args.signal])
            fault = time.monotonic()
            try:
                job.wait(timeout=bound + 60)
            except subprocess.TimeoutExpired:
                pass
            ended_at = time.monotonic() - fault
            # The ranks' state when the launcher is gone (or the wait gave up): all must be gone too.
            leftover = [p for p in ranks.values() if alive(p)]
            hung = job.poll() is None
            if hung or leftover:
                try:
                    os.killpg(job.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                for p in leftover:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                job.wait()
            outcome.update(victim_pid=victim, records_before_fault=records_before, seconds_to_end=ended_at,
                           exit_code=job.returncode, launcher_hung=hung, leftover_pids=leftover)
    text = open(args.stderr, errors="replace").read()
    records, torn = read_records(args.records)
    checks = {}
    if "victim_pid" in outcome:
        checks["ended"] = (not outcome["launcher_hung"] and not outcome["leftover_pids"] and outcome["exit_code"] != 0
                           and outcome["seconds_to_end"] <= bound)
        short = re.escape(host.split(".")[0])
        watchdog = rf"rank\(s\) (?:[^;]*, )?{args.rank} \({short}[^)]*\)[^;]* stopped answering"
        launcher = rf"rank {args.rank} with PID \d+ on node {short}"  # Open MPI may print PID 0
        own = rf"error on rank {args.rank} \({short}|error: rank {args.rank} on {short}"  # main's, or the watchdog's
        checks["named"] = bool(re.search(watchdog, text) or re.search(launcher, text) or re.search(own, text))
        if args.signal == "CUDA":
            checks["injected"] = outcome.get("fault_injected", False)
        checks["no crash"] = not re.search(r"Process received signal|Segmentation fault|core dumped", text)
        # The run's "start" record brackets it; what is checked is the measurements and the end.
        measured = [r for r in records if r.get("subcommand") != "start"]
        intact = measured[:-1]
        last = measured[-1] if measured else {}
        checks["records"] = (not torn and len(intact) >= 1 and
                             all(r.get("subcommand") == "train" and r.get("checks_passed") is True for r in intact) and
                             last.get("subcommand") == "incomplete" and last.get("run_subcommand") == "train" and
                             last.get("complete") is False and bool(last.get("error")))
        outcome["records"] = {"count": len(records), "torn": torn,
                              "intact_world_sizes": [r.get("world_size") for r in intact],
                              "last": {k: last.get(k) for k in ("subcommand", "run_subcommand", "error", "rank", "host")}}
        outcome["collective_named"] = "all_reduce" in text
    errors = [line for line in text.splitlines()
              if "error" in line.lower() or "noticed that process" in line or "stopped answering" in line]
    outcome["messages"] = errors[:12]
    outcome["checks"] = checks
    outcome["passed"] = bool(checks) and all(checks.values())
    with open(args.report, "a") as f:
        f.write(json.dumps(outcome) + "\n")
    verdict = "PASS" if outcome["passed"] else "FAIL"
    detail = ", ".join(f"{k} {'ok' if v else 'NO'}" for k, v in checks.items()) or outcome.get("error", "")
    took = f"ended {outcome['seconds_to_end']:.1f} s after the signal (bound {bound:g} s), " if "seconds_to_end" in outcome else ""
    print(f"peer_fault: {outcome['fault']} rank {args.rank}: {verdict}: {took}{detail}", flush=True)
    sys.exit(0 if outcome["passed"] else 1)


if __name__ == "__main__":
    main()
