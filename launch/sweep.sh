#!/usr/bin/env bash
# Local scaling sweep on one workstation or server: mpirun over 1, 2, 4, ... ranks.
# Default: one launch of N ranks with scalebench's built-in `--scaling` sweep (every world
# size measured in the same job, against the same n = 1). `--per-size`: one launch per
# world size instead (a fresh MPI job each, as separate runs would be).
# Each rank is bound to its GPU's NUMA node (launch/bind_numa.sh) where nvidia-smi and
# numactl are available. The NCCL variables users tune pass through to every rank
# (mpirun -x) and scalebench records them in environment.tuning_variables;
# NCCL_NVLS_ENABLE=0 unless you set it.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: launch/sweep.sh [options] [-- scalebench train flags...]
  -n, --np N          ranks to launch (default: GPUs nvidia-smi lists, else 2)
  --sizes 1,2,4       world sizes to measure (default: 1, 2, 4, ... up to N, and N)
  --per-size          one mpirun launch per world size instead of one launch with --scaling
  -c, --config FILE   workload YAML (default: scalebench's built-in workload)
  --backend B         auto, cpu or cuda (default: scalebench's choice)
  -o, --out FILE      JSONL the records are appended to (default runs/sweep-HOST-TIME.jsonl)
  --bin PATH          scalebench binary (default: build/scalebench)
  --no-bind           do not bind ranks to NUMA nodes
  --mpirun-args "..." extra mpirun flags (e.g. "--mca btl ^openib")
  --dry-run           print the commands instead of running them
Flags after `--` go to `scalebench train` (e.g. -- --precision bf16 --steps 50).
Environment passed to every rank: NCCL_ALGO NCCL_PROTO NCCL_P2P_DISABLE NCCL_P2P_LEVEL
NCCL_SHM_DISABLE NCCL_IB_* NCCL_SOCKET_IFNAME NCCL_DEBUG NCCL_* (all that are set), OMP_NUM_THREADS,
CUDA_VISIBLE_DEVICES.
EOF
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
np="" sizes="" per_size=0 config="" backend="" out="" bin="$root/build/scalebench" bind=1 dry_run=0
source "$root/launch/options.sh"
mpirun_extra=() train_args=()
while (($#)); do
  case $1 in
    -n|--np) needs_value sweep.sh "$@"; np=$2; shift 2 ;;
    --sizes) needs_value sweep.sh "$@"; sizes=$2; shift 2 ;;
    --per-size) per_size=1; shift ;;
    -c|--config) needs_value sweep.sh "$@"; config=$2; shift 2 ;;
    --backend) needs_value sweep.sh "$@"; backend=$2; shift 2 ;;
    -o|--out) needs_value sweep.sh "$@"; out=$2; shift 2 ;;
    --bin) needs_value sweep.sh "$@"; bin=$2; shift 2 ;;
    --no-bind) bind=0; shift ;;
    --mpirun-args) needs_value sweep.sh "$@"; shell_words sweep.sh --mpirun-args mpirun_extra "$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; train_args=("$@"); break ;;
    *) echo "sweep.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "sweep.sh: $*" >&2; exit 2; }
[[ -x $bin ]] || die "$bin: no scalebench binary (build it with launch/build.sh, or pass --bin)"
[[ -z $config || -r $config ]] || die "$config: cannot read config file"
command -v mpirun >/dev/null 2>&1 || die "mpirun not found (install openmpi-bin)"

gpu_count() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || echo 0; }
if [[ -z $np ]]; then
  np=$(gpu_count)
  ((np > 0)) || np=2
fi
whole_count sweep.sh --np "$np"
np=$((10#$np))

# Default sizes: powers of two up to N, then N itself (1,2,4,6 for N = 6).
if [[ -z $sizes ]]; then
  sizes=1
  for ((s = 2; s <= np; s *= 2)); do sizes+=",$s"; done
  [[ ,$sizes, == *,$np,* ]] || sizes+=",$np"
fi
IFS=, read -r -a size_list <<<"$sizes"
for s in "${size_list[@]}"; do
  whole_count sweep.sh "--sizes entry" "$s"
  ((10#$s <= 10#$np)) || die "--sizes '$sizes': $s is more than the $np ranks launched (raise --np)"
done
no_repeats sweep.sh --sizes "${size_list[@]}"

if [[ -z $out ]]; then
  out="$root/runs/sweep-$(hostname -s)-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
fi
((dry_run)) || mkdir -p "$(dirname "$out")"  # a dry run makes nothing

# NVLink SHARP (NVLS) buffers are large and some drivers/fabrics reject them; keep it off
# unless the user asked for it.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

mpirun_args=(--bind-to none)
[[ $EUID -eq 0 ]] && mpirun_args+=(--allow-run-as-root)
# More ranks than cores is fine for CPU tests (and GPU runs need a core per rank only).
mpirun_args+=(--oversubscribe)
tuned=()
while IFS='=' read -r name _; do
  case $name in
    NCCL_*|OMP_NUM_THREADS|CUDA_VISIBLE_DEVICES|UCX_*) mpirun_args+=(-x "$name"); tuned+=("$name=${!name}") ;;
  esac
done < <(env)
mpirun_args+=("${mpirun_extra[@]}")

wrapper=()
if ((bind)); then
  if ! command -v numactl >/dev/null 2>&1; then
    echo "sweep.sh: numactl not found: ranks run without NUMA binding" >&2
  elif [[ $(gpu_count) == 0 ]]; then
    echo "sweep.sh: no GPU visible to nvidia-smi: ranks run without NUMA binding" >&2
  else
    wrapper=("$root/launch/bind_numa.sh")
  fi
fi

train=(train)
[[ -n $config ]] && train+=(--config "$config")
[[ -n $backend ]] && train+=(--backend "$backend")
train+=(--out "$out" "${train_args[@]}")

echo "sweep.sh: world sizes $sizes on $(hostname -s), records to $out" >&2
echo "sweep.sh: tuning variables: ${tuned[*]}" >&2

run() {
  local n=$1; shift
  local cmd=(mpirun -np "$n" "${mpirun_args[@]}" "${wrapper[@]}" "$bin" "${train[@]}" "$@")
  if ((dry_run)); then printf '%q ' "${cmd[@]}"; echo; else "${cmd[@]}"; fi
}

status=0
if ((per_size)); then
  for s in "${size_list[@]}"; do run "$s" --scaling "$s" || status=$?; done
else
  run "$np" --scaling "$sizes" || status=$?
fi
if ((status)); then
  echo "sweep.sh: a launch failed (exit $status); records of the sizes that finished are in $out" >&2
elif ((!dry_run)); then
  echo "sweep.sh: records appended to $out" >&2
fi
exit "$status"
