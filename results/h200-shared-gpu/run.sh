#!/usr/bin/env bash
# Several ranks on one H200 (--share-gpu; docs/multi-gpu.md, "Ranks sharing a GPU"): everything
# the mode's "done when" asks, from the repository root, in two calls of under 9 minutes each.
#   results/h200-shared-gpu/run.sh a   build (targets scalebench and scalebench_gpu_tests);
#       launch/multi_gpu_plan.sh --share-gpu 2 part1: the SharedGpu* GPU tests at 2 ranks (each
#       rank's results), comm --op all at 1 and 2 ranks (both under the mode's MPS daemon), then
#       10 each of SIGKILL, SIGSTOP and a CUDA fault of rank 1 (timeout 8 s, time-sliced)
#   results/h200-shared-gpu/run.sh b   build (reused when the machine kept it); bert-base b32
#       and resnet50 b64 at 1 and 2 ranks, scalebench (--recheck-allreduce; comm cost against
#       its no-communication steps) beside PyTorch DDP (ddp_bench.py, against no_sync), bucket
#       25 MB; a rank slowed by 30 ms a step and none; the fabric grid (all_reduce 1 MB to 64 MB:
#       the mode's default, NCCL's 4 MiB buffers, 32 MiB buffers, socket threads, time-sliced
#       without MPS), each setting 3 times, the repetitions interleaved; 4 ranks once; then the
#       SharedGpu* tests at 4 ranks
# Each call writes three files to $OUT: PART.log, PART-summary.md (summarize.py: pass or fail
# per requirement, then the tables) and PART-details.tar.gz (every record, log and table).
# LIMIT (default 520) caps the seconds a call may take, the build included.
set -uo pipefail
part=${1:?part a or b}
[[ $part == a || $part == b ]] || { echo "run.sh: '$part': expected a or b" >&2; exit 2; }
O=$(realpath -m "${OUT:?OUT: the folder the results go to}")  # before the cd: a relative OUT is the caller's
mkdir -p "$O" || exit 2
cd "$(dirname "$0")/../.." || exit 2
B=build-gpu
W=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# Seconds left of the call's LIMIT, capped at $1: no stage runs past it, so the results are packed.
left() { local l=$(( ${LIMIT:-520} - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
mpirun=(mpirun --bind-to none --oversubscribe); [[ $EUID -eq 0 ]] && mpirun+=(--allow-run-as-root)
exec > >(tee "$O/$part.log") 2>&1
pack() {
  python3 results/h200-shared-gpu/summarize.py "$W" >"$O/$part-summary.md" 2>"$W/summarize.err"
  cat "$O/$part-summary.md"
  tar -czf "$O/$part-details.tar.gz" -C "$W" .
  rm -rf "$W"
  el "part $part done"
}
trap pack EXIT
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

el build
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
  cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests; } >"$W/build.log" 2>&1 ||
  { tail -30 "$W/build.log"; exit 1; }
el "built: $(grep -c 'Building' "$W/build.log") compile steps"

if [[ $part == a ]]; then
  el "launch/multi_gpu_plan.sh --share-gpu 2 part1"
  BUILD_DIR=$B PLAN_BUDGET_S=$(left 480) launch/multi_gpu_plan.sh --share-gpu 2 "$W/plan" part1 2>&1 | tail -45
  exit 0
fi

# The mode's MPS daemon (as launch/multi_gpu_plan.sh starts it), for the tests, the side by side
# and the grid's settings that do not say "time-sliced".
mps_on() {
  command -v nvidia-cuda-mps-control >/dev/null || { echo "   no nvidia-cuda-mps-control: time-sliced"; return 0; }
  export CUDA_MPS_PIPE_DIRECTORY=$W/mps/pipe CUDA_MPS_LOG_DIRECTORY=$W/mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "   the MPS daemon did not start: time-sliced"; mps_off; }
}
mps_off() {
  [[ -n ${CUDA_MPS_PIPE_DIRECTORY:-} ]] && echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
trap 'mps_off; pack' EXIT
mps_on

R=$W/records; mkdir -p "$R" "$W/gtest-np4"
sb() {  # NAME SECONDS NP ARGS...: scalebench under mpirun, log in $R/NAME.log
  local name=$1 limit=$2 np=$3; shift 3
  el "$name"
  timeout "$(left "$limit")" "${mpirun[@]}" -np "$np" "$B/scalebench" "$@" >"$R/$name.log" 2>&1
  echo "   exit $?"; grep -E '^ +[0-9]+ |straggler|error' "$R/$name.log" | head -8
}
# The side by side: the same batch per rank and bucket size (25 MB), bf16.
sb bert-base 100 2 train --config configs/bert-base.yaml --share-gpu --batch-size 32 --precision bf16 \
  --scaling 1,2 --steps 12 --warmup 3 --bucket-mb 25 --recheck-allreduce --out "$R/train.jsonl"
sb resnet50 100 2 train --config configs/resnet50.yaml --share-gpu --batch-size 64 --precision bf16 \
  --scaling 1,2 --steps 12 --warmup 3 --bucket-mb 25 --recheck-allreduce --out "$R/train.jsonl"
el "PyTorch DDP, 2 ranks sharing the GPU"
timeout "$(left 180)" python3 -m torch.distributed.run --standalone --nproc_per_node 2 tests/reference/ddp_bench.py \
  --share-gpu --workload bert-base:32 --workload resnet50:64 --scaling 1,2 --steps 12 --warmup 3 --bucket-cap-mb 25 \
  --device cuda --precision bf16 --out "$R/ddp.jsonl" >"$R/ddp.log" 2>&1
echo "   exit $?"; tail -6 "$R/ddp.log"
# A straggler made on purpose: rank 1 sleeps 30 ms at each step's start.
SCALEBENCH_TEST_DELAY_RANK=1:30 sb straggler 60 2 train --config configs/ci-small.yaml --share-gpu \
  --scaling 2 --steps 20 --out "$R/straggler.jsonl"
sb no-straggler 60 2 train --config configs/ci-small.yaml --share-gpu --scaling 2 --steps 20 \
  --out "$R/no-straggler.jsonl"

# The fabric: all_reduce at 2 ranks, 1 MB to 64 MB, one setting changed from the mode's default
# (NCCL_BUFFSIZE 16 MiB, 4 socket threads of 4 sockets, the MPS daemon) at a time; every setting 3 times, the repetitions
# interleaved (one round of every setting, then the next), so a drift of the machine reaches
# every setting alike. summarize.py calls a setting faster only when its slowest repetition beats
# the other's fastest.
grid() {  # NAME REP NP ENV...
  local name=$1 rep=$2 np=$3; shift 3
  el "fabric $name, repetition $rep"
  timeout "$(left 40)" env "$@" "${mpirun[@]}" -np "$np" "$B/scalebench" comm --share-gpu --op all_reduce -b 1M -e 64M \
    -f 8 -n 10 --out "$R/fabric-$name-r$rep.jsonl" >"$R/fabric-$name-r$rep.log" 2>&1
  echo "   exit $?"; grep -E '^ +67108864 ' "$R/fabric-$name-r$rep.log" | head -1
}
for rep in 1 2 3; do
  grid mode-default "$rep" 2
  grid nccl-buffsize-4M "$rep" 2 NCCL_BUFFSIZE=4194304
  grid buffsize-32M "$rep" 2 NCCL_BUFFSIZE=33554432
  grid sockets-1x1 "$rep" 2 NCCL_SOCKET_NTHREADS=1 NCCL_NSOCKS_PERTHREAD=1
  mps_off
  grid time-sliced "$rep" 2
  mps_on
done
grid ranks4 1 4

el "SharedGpu* tests at 4 ranks"
timeout "$(left 150)" "${mpirun[@]}" -np 4 bash -c \
  'exec "$@" --gtest_output="xml:'"$W"'/gtest-np4/rank${OMPI_COMM_WORLD_RANK}.xml"' _ \
  "$B/tests/scalebench_gpu_tests" --gtest_filter='*SharedGpu*' >"$R/shared_gpu_tests_np4.log" 2>&1
echo "   exit $?"

mps_off
exit 0  # the verdicts are in b-summary.md
