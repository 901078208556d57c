#!/usr/bin/env bash
# The Slurm batch scripts against a real Slurm: a private one-node cluster on localhost.
#   tests/slurm/run_slurm_test.sh SCALEBENCH_BINARY SOURCE_DIR
# Installs slurm-wlm and munge from Debian when missing (needs root), writes a slurm.conf
# for this host in a temp folder (its own ports, spool and state; no cgroups), starts
# munged (own key and socket), slurmctld and slurmd, then submits with sbatch:
#   1. launch/slurm/single_node.sbatch, ranks started by srun (--mpi chosen by the script)
#   2. the same with SCALEBENCH_LAUNCHER=mpirun
#   3. launch/slurm/node_sweep.sh --nodes 1 (multi_node.sbatch)
# each running `scalebench train` on the CPU backend with 2 tasks, and checks the JSONL
# they wrote: one record per world size, the job's SLURM_JOB_ID in the environment
# record, NCCL variables passed through. Daemons it started are stopped by pid on exit.
# Exit 0 pass, 1 fail, 77 skip (Slurm cannot be installed or started here).
set -uo pipefail

bin=${1:?usage: run_slurm_test.sh SCALEBENCH_BINARY SOURCE_DIR}
src=${2:?usage: run_slurm_test.sh SCALEBENCH_BINARY SOURCE_DIR}
bin=$(realpath "$bin") src=$(realpath "$src")
SKIP=77
log() { echo "slurm test: $*"; }
skip() { log "SKIP: $*"; exit $SKIP; }
[[ -x $bin ]] || { log "FAIL: $bin is not an executable"; exit 1; }

# A test run inside someone's Slurm job (or mpirun) must not talk to that one.
while IFS='=' read -r name _; do
  case $name in SLURM_*|SBATCH_*|SRUN_*|SALLOC_*|OMPI_*|PMIX_*) unset "$name" ;; esac
done < <(env)

# --- Slurm and munge from Debian ------------------------------------------------------
have_slurm() {
  for c in sbatch srun squeue sinfo scontrol scancel; do command -v "$c" >/dev/null 2>&1 || return 1; done
  [[ -x /usr/sbin/slurmctld && -x /usr/sbin/slurmd && -x /usr/sbin/munged ]] && command -v munge >/dev/null 2>&1
}
if ! have_slurm; then
  [[ $EUID -eq 0 ]] || skip "slurm-wlm/munge are not installed and installing them needs root"
  command -v apt-get >/dev/null 2>&1 || skip "slurm-wlm/munge are not installed and there is no apt-get"
  log "installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  install() { timeout 600 apt-get install -y -qq --no-install-recommends slurm-wlm munge >/tmp/slurm-test-apt.log 2>&1; }
  install || { timeout 300 apt-get update -qq >>/tmp/slurm-test-apt.log 2>&1 && install; } ||
    { tail -20 /tmp/slurm-test-apt.log; skip "apt-get could not install slurm-wlm and munge"; }
  have_slurm || skip "slurm-wlm installed but its commands are missing"
fi

# --- the private cluster ---------------------------------------------------------------
tmp=$(mktemp -d /tmp/scalebench-slurm.XXXXXX)
chmod 711 "$tmp"  # munged wants its socket's folders searchable by all
pids=() jobs_submitted=()
cleanup() {
  local rc=$?
  if ((${#jobs_submitted[@]})); then timeout 20 scancel "${jobs_submitted[@]}" >/dev/null 2>&1; fi
  # Daemons in reverse start order; TERM, a bounded wait, then KILL.
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.2
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  if [[ $keep_tmp == 1 ]]; then log "kept $tmp"; else rm -rf "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

show_logs() {
  for f in "$tmp"/log/*; do [[ -s $f ]] && { echo "--- $f"; tail -30 "$f"; }; done
}
fail() { log "FAIL: $*"; show_logs; exit 1; }
keep_tmp=${SCALEBENCH_SLURM_TEST_KEEP:-0}  # 1: leave the temp folder for a post-mortem
cannot_start() { log "SKIP: $*"; show_logs; exit $SKIP; }

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.5 s; fails after SECONDS.
wait_for() {
  local seconds=$1 what=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { log "timed out after ${seconds}s waiting for $what"; return 1; }
    sleep 0.5
  done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ctld_port=16817 d_port=16818
until port_free "$ctld_port" && port_free "$d_port"; do
  ctld_port=$((20000 + RANDOM % 20000)) d_port=$((ctld_port + 1))
done

host=$(hostname -s)
mkdir -p "$tmp/munge" "$tmp/spool" "$tmp/state" "$tmp/log"
chmod 711 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
socket=$tmp/munge/munge.sock

/usr/sbin/munged --foreground --force --key-file="$tmp/munge/munge.key" --socket="$socket" \
  --pid-file="$tmp/munge/munged.pid" --seed-file="$tmp/munge/munged.seed" \
  --log-file="$tmp/log/munged.log" >"$tmp/log/munged.out" 2>&1 &
pids+=($!)
munge_ok() { munge -n -S "$socket" | unmunge -S "$socket"; }
wait_for 15 "munged" munge_ok || cannot_start "munged did not start"

cpus=$(nproc)
export SLURM_CONF=$tmp/slurm.conf
cat >"$SLURM_CONF" <<EOF
# One-node test cluster on localhost, written by tests/slurm/run_slurm_test.sh.
ClusterName=scalebench-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=600
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

/usr/sbin/slurmctld -D -i -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
wait_for 30 "slurmctld" scontrol ping || cannot_start "slurmctld did not start"
/usr/sbin/slurmd -D -f "$SLURM_CONF" >"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { [[ $(sinfo -h -n "$host" -o %t) == idle ]]; }
wait_for 60 "node $host to be idle" node_idle || cannot_start "slurmd did not register node $host as idle"
log "cluster up: $host, $cpus CPUs, ports $ctld_port/$d_port; srun --mpi=list: $(srun --mpi=list 2>&1 | tr '\n\t' '  ')"

# --- jobs --------------------------------------------------------------------------------
# Two tasks of one CPU each, no GPU (0 overrides the scripts' --gpus-per-node), CPU backend.
# A tuned NCCL variable must reach the records; NCCL_NVLS_ENABLE must default to 0.
export NCCL_ALGO=Ring NCCL_DEBUG=WARN
unset NCCL_NVLS_ENABLE
sbatch_common=(--parsable --ntasks=2 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 --time=00:05:00)
train_args=(--config "$src/configs/ci-small.yaml" --backend cpu)
cd "$src" || fail "cannot cd to $src"
submit() {  # submit LAUNCHER NAME: prints the job id
  SCALEBENCH_LAUNCHER=$1 SCALEBENCH_BIN=$bin SCALEBENCH_OUT=$tmp/$2.jsonl SCALEBENCH_SCALING=1,2 \
    sbatch "${sbatch_common[@]}" --job-name="sb-$2" --output="$tmp/log/$2-%j.out" \
    launch/slurm/single_node.sbatch "${train_args[@]}"
}
srun_job=$(submit srun srun) || fail "sbatch (srun variant) failed"
jobs_submitted+=("$srun_job")
mpirun_job=$(submit mpirun mpirun) || fail "sbatch (mpirun variant) failed"
jobs_submitted+=("$mpirun_job")
sweep_jobs=$(SCALEBENCH_BIN=$bin launch/slurm/node_sweep.sh --nodes 1 --gpus-per-node 0 --tasks-per-node 2 --dir "$tmp/sweep" \
  --job-name sb-node-sweep --time 00:05:00 --sbatch-args "--cpus-per-task=1 --output=$tmp/log/sweep-%j.out" \
  -- "${train_args[@]}") || fail "node_sweep.sh failed"
sweep_job=${sweep_jobs%%$'\n'*}
jobs_submitted+=("$sweep_job")
log "submitted jobs: srun $srun_job, mpirun $mpirun_job, node sweep $sweep_job"

queue_empty() { [[ -z $(squeue -h -j "$(IFS=,; echo "${jobs_submitted[*]}")" -o %i 2>/dev/null) ]]; }
wait_for 300 "the jobs to finish" queue_empty || { squeue; fail "jobs did not finish in 300 s"; }

job_state() { scontrol show job "$1" | grep -o 'JobState=[A-Z_]*\|ExitCode=[0-9:]*' | tr '\n' ' '; }
status=0
for j in "$srun_job" "$mpirun_job" "$sweep_job"; do
  state=$(job_state "$j")
  log "job $j: $state"
  [[ $state == *"JobState=COMPLETED"*"ExitCode=0:0"* ]] || { status=1; log "job $j did not complete cleanly"; }
done
((status == 0)) || fail "a job failed (its output is above)"

grep -q -- '--mpi=pmix\|--mpi=pmi2' "$tmp"/log/srun-"$srun_job".out ||
  log "note: srun ran without an --mpi plugin (none of pmix/pmi2 listed)"

# --- the records -----------------------------------------------------------------------------
check_records() {  # check_records FILE JOB_ID LABEL
  /usr/bin/env python3 - "$@" <<'EOF'
import json, sys
path, job, label = sys.argv[1:4]
try:
    lines = [l for l in open(path) if l.strip()]
except OSError as e:
    sys.exit(f"{label}: {path}: {e.strerror}")
records = [json.loads(l) for l in lines]
errors = []
# The run is bracketed by its start and end records (results/SCHEMA.md); the rest are measurements.
brackets = [r for r in records if r.get("subcommand") in ("start", "end")]
kinds = [r.get("subcommand") for r in brackets]
if kinds != ["start", "end"] or records[0] is not brackets[0] or records[-1] is not brackets[-1]:
    errors.append(f"bracket records {kinds}, expected one start first and one end last")
elif brackets[1].get("complete") is not True or brackets[1].get("exit_code") != 0 or \
        brackets[0].get("run_id") != brackets[1].get("run_id"):
    errors.append(f"end record {brackets[1]} does not close the run {brackets[0].get('run_id')} cleanly")
records = [r for r in records if r not in brackets]
sizes = sorted(r.get("world_size") or 0 for r in records)
if sizes != [1, 2]:
    errors.append(f"world sizes {sizes}, expected one record each for [1, 2]")
for r in records:
    n = r.get("world_size")
    env = r.get("environment", {})
    slurm = env.get("slurm", {})
    tuning = env.get("tuning_variables", {})
    if r.get("subcommand") != "train": errors.append(f"n={n}: subcommand {r.get('subcommand')!r}")
    if r.get("backend") != "cpu": errors.append(f"n={n}: backend {r.get('backend')!r}")
    if r.get("launched_world_size") != 2: errors.append(f"n={n}: launched_world_size {r.get('launched_world_size')}")
    if len(env.get("hostnames", [])) != 2: errors.append(f"n={n}: hostnames {env.get('hostnames')}")
    if slurm.get("SLURM_JOB_ID") != job: errors.append(f"n={n}: environment.slurm.SLURM_JOB_ID {slurm.get('SLURM_JOB_ID')!r}, job was {job}")
    if slurm.get("SLURM_JOB_NUM_NODES") != "1": errors.append(f"n={n}: SLURM_JOB_NUM_NODES {slurm.get('SLURM_JOB_NUM_NODES')!r}")
    if tuning.get("NCCL_ALGO") != "Ring": errors.append(f"n={n}: NCCL_ALGO not passed through: {tuning.get('NCCL_ALGO')!r}")
    if tuning.get("NCCL_NVLS_ENABLE") != "0": errors.append(f"n={n}: NCCL_NVLS_ENABLE {tuning.get('NCCL_NVLS_ENABLE')!r}, expected '0'")
    if r.get("checks_passed") is not True: errors.append(f"n={n}: checks_passed {r.get('checks_passed')}")
    if not (r.get("samples_per_s", 0) > 0): errors.append(f"n={n}: samples_per_s {r.get('samples_per_s')}")
if errors:
    sys.exit(f"{label} ({path}):\n  " + "\n  ".join(errors))
print(f"{label}: {len(records)} records, world sizes {sizes}, SLURM_JOB_ID {job}: ok")
EOF
}
check_records "$tmp/srun.jsonl" "$srun_job" "srun variant" || status=1
check_records "$tmp/mpirun.jsonl" "$mpirun_job" "mpirun variant" || status=1
check_records "$tmp/sweep/nodes-1.jsonl" "$sweep_job" "node sweep" || status=1
if ((status)); then
  for f in "$tmp"/log/{srun,mpirun,sweep}-*.out; do echo "--- $f"; cat "$f"; done
  fail "records do not say what the jobs did"
fi
log "PASS"
