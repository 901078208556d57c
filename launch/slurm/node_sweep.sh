#!/usr/bin/env bash
# Sweep over node counts: submits launch/slurm/multi_node.sbatch once per node count.
#   launch/slurm/node_sweep.sh --nodes 1,2,4,8 -- --config configs/mlp-large.yaml
#   launch/slurm/node_sweep.sh --nodes 2,4 --gpus-per-node 4 --sbatch-args "-p gpu -A myproj"
# Each job measures world sizes 1 and nodes x GPUs per node (SCALEBENCH_SCALING overrides),
# so every record's efficiency is against one GPU of the same allocation. Jobs run one
# after another (--dependency=singleton on a shared job name) so they never contend for
# the fabric; --parallel lets them run at once. Each job writes its own JSONL
# (DIR/nodes-N.jsonl): concurrent appends to one file over NFS are not atomic.
# Prints the job ids, one per line, on stdout.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: launch/slurm/node_sweep.sh --nodes 1,2,4 [options] [-- scalebench train flags...]
  --nodes LIST          node counts, one job each (required)
  --gpus-per-node G     GPUs (and tasks) per node (default 8; 0: CPU ranks, no GPU request)
  --tasks-per-node T    tasks per node when it differs from G (CPU runs)
  --dir DIR             where the JSONL files go (default runs/node-sweep-TIME)
  --job-name NAME       (default scalebench-node-sweep)
  --time HH:MM:SS       per job (default 01:00:00)
  --launcher srun|mpirun   (default srun; sets SCALEBENCH_LAUNCHER)
  --sbatch-args "..."   extra sbatch flags (partition, account, constraint, ...)
  --parallel            let the jobs run at the same time
EOF
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
nodes="" gpus=8 tasks="" dir="" name=scalebench-node-sweep time_limit=01:00:00 parallel=0
source "$root/launch/options.sh"
launcher=${SCALEBENCH_LAUNCHER:-srun}
sbatch_extra=() train_args=()
while (($#)); do
  case $1 in
    --nodes) needs_value node_sweep.sh "$@"; nodes=$2; shift 2 ;;
    --gpus-per-node) needs_value node_sweep.sh "$@"; gpus=$2; shift 2 ;;
    --tasks-per-node) needs_value node_sweep.sh "$@"; tasks=$2; shift 2 ;;
    --dir) needs_value node_sweep.sh "$@"; dir=$2; shift 2 ;;
    --job-name) needs_value node_sweep.sh "$@"; name=$2; shift 2 ;;
    --time) needs_value node_sweep.sh "$@"; time_limit=$2; shift 2 ;;
    --launcher) needs_value node_sweep.sh "$@"; launcher=$2; shift 2 ;;
    --sbatch-args) needs_value node_sweep.sh "$@"; shell_words node_sweep.sh --sbatch-args sbatch_extra "$2"; shift 2 ;;
    --parallel) parallel=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; train_args=("$@"); break ;;
    *) echo "node_sweep.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "node_sweep.sh: $*" >&2; exit 2; }
[[ -n $nodes ]] || die "--nodes is required (e.g. --nodes 1,2,4)"
whole_count node_sweep.sh --gpus-per-node "$gpus" 0
gpus=$((10#$gpus))
[[ -n $tasks ]] || ((gpus)) || die "--gpus-per-node 0 (CPU ranks) needs --tasks-per-node"
tasks=${tasks:-$gpus}
whole_count node_sweep.sh --tasks-per-node "$tasks"
tasks=$((10#$tasks))
IFS=, read -r -a node_list <<<"$nodes"
for n in "${node_list[@]}"; do
  whole_count node_sweep.sh "--nodes entry" "$n"
  ((10#$n * tasks <= max_count)) || die "--nodes $n x --tasks-per-node $tasks: more than $max_count ranks"
done
no_repeats node_sweep.sh --nodes "${node_list[@]}"
# The values first: a refusal says what is wrong with them, wherever it runs.
command -v sbatch >/dev/null 2>&1 || die "sbatch not found: run this on a Slurm login node"
dir=${dir:-$root/runs/node-sweep-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)


for n in "${node_list[@]}"; do
  n=$((10#$n))
  world=$((n * tasks))
  args=(--parsable --job-name="$name" --nodes="$n" --ntasks-per-node="$tasks" --time="$time_limit"
        --output="$dir/nodes-$n-%j.out" --chdir="$root")
  args+=(--gpus-per-node="$gpus")  # 0 overrides the script's GPU request
  ((parallel)) || args+=(--dependency=singleton)
  job=$(SCALEBENCH_ROOT=$root SCALEBENCH_LAUNCHER=$launcher \
        SCALEBENCH_SCALING=${SCALEBENCH_SCALING:-$( ((world > 1)) && echo "1,$world" || echo 1)} \
        SCALEBENCH_OUT="$dir/nodes-$n.jsonl" \
        sbatch "${args[@]}" "${sbatch_extra[@]}" "$root/launch/slurm/multi_node.sbatch" "${train_args[@]}")
  job=${job%%;*}  # --parsable prints "id" or "id;cluster"
  echo "node_sweep.sh: $n node(s), $world tasks: job $job -> $dir/nodes-$n.jsonl" >&2
  echo "$job"
done
