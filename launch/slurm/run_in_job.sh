#!/usr/bin/env bash
# Runs `scalebench train` on every task of the current Slurm allocation; the batch scripts
# (single_node.sbatch, multi_node.sbatch) call it. Arguments go to `scalebench train`.
# Settings, from the environment (sbatch passes the submitting shell's environment):
#   SCALEBENCH_LAUNCHER  srun (default) or mpirun: who starts the ranks inside the allocation
#   SCALEBENCH_SRUN_MPI  srun's --mpi plugin (default: pmix when `srun --mpi=list` has it, else pmi2,
#                        else Slurm's default); Open MPI 4.1 as Debian builds it needs pmix
#   SCALEBENCH_SCALING   world sizes, e.g. 1,8,16 (default: 1, 2, 4, ... up to the task count, and it)
#   SCALEBENCH_OUT       JSONL file (default: runs/slurm-JOBNAME-JOBID.jsonl under SCALEBENCH_ROOT)
#   SCALEBENCH_ROOT      the scalebench checkout (default: the folder sbatch was run from)
#   SCALEBENCH_BIN       the binary (default: SCALEBENCH_ROOT/build/scalebench); must be on a file
#                        system every node sees
#   SCALEBENCH_BIND      1 (default): bind each rank to its GPU's NUMA node where numactl and
#                        nvidia-smi exist; 0: no binding
#   SCALEBENCH_MPIRUN_ARGS, SCALEBENCH_SRUN_ARGS  extra launcher flags
# The job's SLURM_* facts and the NCCL_* variables land in every record's environment.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../options.sh"

say() { echo "scalebench job ${SLURM_JOB_ID:-?}: $*" >&2; }
die() { say "$*"; exit 2; }

# Everything is checked before anything is made or said: a refusal is one line, exit 2.
[[ -n ${SLURM_JOB_ID:-} ]] || die "not inside a Slurm allocation (submit with sbatch, or run under salloc)"
root=${SCALEBENCH_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
bin=${SCALEBENCH_BIN:-$root/build/scalebench}
[[ -x $bin ]] || die "$bin: no scalebench binary (build it first, or set SCALEBENCH_BIN / SCALEBENCH_ROOT)"
launcher=${SCALEBENCH_LAUNCHER:-srun}
case $launcher in
  srun) shell_words "scalebench job" SCALEBENCH_SRUN_ARGS extra "${SCALEBENCH_SRUN_ARGS:-}" ;;
  mpirun)
    shell_words "scalebench job" SCALEBENCH_MPIRUN_ARGS extra "${SCALEBENCH_MPIRUN_ARGS:-}"
    command -v mpirun >/dev/null 2>&1 || die "mpirun not found on $(hostname -s)" ;;
  *) die "SCALEBENCH_LAUNCHER='$launcher': use srun or mpirun" ;;
esac
[[ ${SCALEBENCH_BIND:-1} == [01] ]] || die "SCALEBENCH_BIND '${SCALEBENCH_BIND}': use 1 (bind) or 0"
# The task count from the variable Slurm set (SLURM_NPROCS is its older name), named as read.
if [[ -n ${SLURM_NTASKS:-} ]]; then ntasks_from=SLURM_NTASKS
elif [[ -n ${SLURM_NPROCS:-} ]]; then ntasks_from=SLURM_NPROCS
else die "SLURM_NTASKS is not set: request tasks (--ntasks or --ntasks-per-node)"
fi
ntasks=${!ntasks_from}
whole_count "scalebench job" "$ntasks_from" "$ntasks"

if [[ -n ${SCALEBENCH_SCALING:-} ]]; then
  scaling=$SCALEBENCH_SCALING
  IFS=, read -r -a sizes <<<"$scaling"
  ((${#sizes[@]})) || die "SCALEBENCH_SCALING '$scaling': no world size"
  for s in "${sizes[@]}"; do whole_count "scalebench job" "SCALEBENCH_SCALING entry" "$s"; done
  no_repeats "scalebench job" SCALEBENCH_SCALING "${sizes[@]}"
else
  scaling=1
  for ((s = 2; s <= ntasks; s *= 2)); do scaling+=",$s"; done
  [[ ,$scaling, == *,$ntasks,* ]] || scaling+=",$ntasks"
fi
out=${SCALEBENCH_OUT:-$root/runs/slurm-${SLURM_JOB_NAME:-job}-$SLURM_JOB_ID.jsonl}
mkdir -p "$(dirname "$out")" 2>/dev/null || die "SCALEBENCH_OUT '$out': cannot make its folder"

# NVLink SHARP (NVLS) stays off unless asked for: its buffers fail on some drivers and fabrics.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

# NUMA binding wrapper, when this (first) node has what it needs; other nodes are alike.
wrapper=()
if [[ ${SCALEBENCH_BIND:-1} == 1 ]]; then
  if command -v numactl >/dev/null 2>&1 && command -v nvidia-smi >/dev/null 2>&1 &&
     nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    wrapper=("$root/launch/bind_numa.sh")
  else
    say "no NUMA binding (needs numactl and a GPU visible to nvidia-smi)"
  fi
fi

train=("$bin" train --scaling "$scaling" --out "$out" "$@")
say "$ntasks tasks on ${SLURM_JOB_NUM_NODES:-1} node(s) (${SLURM_JOB_NODELIST:-?}), launcher $launcher," \
    "world sizes $scaling, records to $out"

case $launcher in
  srun)
    mpi=${SCALEBENCH_SRUN_MPI:-}
    if [[ -z $mpi ]]; then
      plugins=$(srun --mpi=list 2>&1 || true)
      if grep -qw pmix <<<"$plugins"; then mpi=pmix
      elif grep -qw pmi2 <<<"$plugins"; then mpi=pmi2
      fi
    fi
    srun_args=(--kill-on-bad-exit=1)
    # Slurm 22.05+ steps do not inherit the job's --cpus-per-task; give each rank its cores.
    [[ -n ${SLURM_CPUS_PER_TASK:-} ]] && srun_args+=("--cpus-per-task=$SLURM_CPUS_PER_TASK")
    [[ -n $mpi ]] && srun_args+=("--mpi=$mpi")
    say "srun ${srun_args[*]} ${extra[*]}"
    exec srun "${srun_args[@]}" "${extra[@]}" "${wrapper[@]}" "${train[@]}"
    ;;
  mpirun)
    # Open MPI reads the allocation (hosts, slots) from Slurm itself; environment variables
    # reach the ranks on other nodes only when named with -x.
    mpirun_args=(-np "$ntasks" --bind-to none)
    [[ $EUID -eq 0 ]] && mpirun_args+=(--allow-run-as-root)
    while IFS='=' read -r name _; do
      case $name in NCCL_*|OMP_NUM_THREADS|UCX_*) mpirun_args+=(-x "$name") ;; esac
    done < <(env)
    say "mpirun ${mpirun_args[*]} ${extra[*]}"
    exec mpirun "${mpirun_args[@]}" "${extra[@]}" "${wrapper[@]}" "${train[@]}"
    ;;
esac
