#!/usr/bin/env bash
# Several ranks on one H200 (--share-gpu; docs/multi-gpu.md, "Ranks sharing a GPU"), from the
# repository root, in two calls of under 9 minutes each (the second reuses the first's build):
#   results/h200-shared-gpu/run.sh a   build (launch/build.sh's configure; targets scalebench and
#                                      scalebench_gpu_tests); launch/multi_gpu_plan.sh part1 --share-gpu 2 (the
#                                      SharedGpu* GPU tests at 2 ranks, comm --op all at 1 and 2,
#                                      each fault FAULT_REPS times, default 3: SIGKILL, SIGSTOP,
#                                      CUDA work failing); the SharedGpu* tests at 4 ranks
#   results/h200-shared-gpu/run.sh b   build (reused); bert-base b32 and resnet50 b64 at 1 and 2
#                                      ranks, scalebench beside PyTorch DDP (bucket 25 MB); a rank
#                                      slowed by 30 ms a step named as a straggler; the fabric grid
#                                      (comm all_reduce at 2 ranks: defaults, NCCL_SOCKET_NTHREADS x
#                                      NCCL_NSOCKS_PERTHREAD, NCCL_BUFFSIZE, under MPS; 4 ranks)
# Writes to $OUT (at most 8 files): part a: plan-summary.md, plan-faults.md, plan-comm.md and
# details-part1.tar.gz from the plan (every table is in the archive's folder too), a.log,
# a-logs.tar.gz; part b: b.log, b-summary.md, b-records.tar.gz (records and logs).
set -uo pipefail
part=${1:?part a or b}
O=${OUT:?OUT: the folder the results go to}
cd "$(dirname "$0")/../.." || exit 2
B=build-gpu
W=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# Seconds left of the call's 520, capped at $1: no stage runs past it, so the results are packed.
left() { local l=$(( ${LIMIT:-520} - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
mpirun=(mpirun --bind-to none --oversubscribe); [[ $EUID -eq 0 ]] && mpirun+=(--allow-run-as-root)
exec > >(tee "$O/$part.log") 2>&1
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

el build
# launch/build.sh's configure, and only the two targets used here (the whole tree takes longer).
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
  cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests; } >"$W/build.log" 2>&1 ||
  { tail -30 "$W/build.log"; cp "$W/build.log" "$O/"; exit 1; }
el "built: $(grep -c 'Building' "$W/build.log") compile steps"

shared_tests() {  # NP
  el "SharedGpu* tests at $1 ranks"
  timeout "$(left 200)" "${mpirun[@]}" -np "$1" "$B/tests/scalebench_gpu_tests" --gtest_filter='SharedGpu*' \
    >"$W/shared_gpu_tests_np$1.log" 2>&1
  echo "   exit $?"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]' "$W/shared_gpu_tests_np$1.log" | head -20
}

if [[ $part == a ]]; then
  el "launch/multi_gpu_plan.sh part1 --share-gpu 2"
  mkdir -p "$W/plan" "$W/return"
  BUILD_DIR=$B FAULT_REPS=${FAULT_REPS:-3} PLAN_BUDGET_S=$(left 330) \
    launch/multi_gpu_plan.sh --share-gpu 2 --return "$W/return" "$W/plan" part1 2>&1 | tail -40
  for f in summary faults comm; do cp "$W/return/$f.md" "$O/plan-$f.md" 2>/dev/null; done
  cp "$W/return"/*.tar.gz "$O/" 2>/dev/null
  shared_tests 4
  tar -czf "$O/a-logs.tar.gz" -C "$W" --exclude plan .
  el "part a done"
  exit 0
fi
[[ $part == b ]] || { echo "run.sh: '$part': expected a or b" >&2; exit 2; }

R=$W/records; mkdir -p "$R"
sb() {  # NAME SECONDS NP ARGS...: scalebench under mpirun, log in $R/NAME.log
  local name=$1 limit=$2 np=$3; shift 3
  el "$name"
  timeout "$(left "$limit")" "${mpirun[@]}" -np "$np" "$B/scalebench" "$@" >"$R/$name.log" 2>&1
  echo "   exit $?"; grep -E '^ +[0-9]+ |straggler|shared GPU|error' "$R/$name.log" | head -8
}
# The side by side: same batch per rank, bucket 25 MB, bf16, CUDA graphs on (scalebench's default).
sb bert-base 100 2 train --config configs/bert-base.yaml --share-gpu --batch-size 32 --precision bf16 \
  --scaling 1,2 --steps 6 --warmup 2 --bucket-mb 25 --recheck-allreduce --out "$R/train.jsonl"
sb resnet50 100 2 train --config configs/resnet50.yaml --share-gpu --batch-size 64 --precision bf16 \
  --scaling 1,2 --steps 6 --warmup 2 --bucket-mb 25 --recheck-allreduce --out "$R/train.jsonl"
el "PyTorch DDP, 2 ranks sharing the GPU"
timeout "$(left 150)" python3 -m torch.distributed.run --standalone --nproc_per_node 2 tests/reference/ddp_bench.py \
  --share-gpu --run bert-base:32 --run resnet50:64 --scaling 1,2 --steps 6 --warmup 2 --bucket-cap-mb 25 \
  --device cuda --precision bf16 --out "$R/ddp.jsonl" >"$R/ddp.log" 2>&1
echo "   exit $?"; tail -6 "$R/ddp.log"
# A straggler made on purpose: rank 1 sleeps 30 ms at each step's start.
SCALEBENCH_TEST_DELAY_RANK=1:30 sb straggler 60 2 train --config configs/ci-small.yaml --share-gpu \
  --scaling 2 --steps 20 --out "$R/straggler.jsonl"
sb no-straggler 60 2 train --config configs/ci-small.yaml --share-gpu --scaling 2 --steps 20 \
  --out "$R/no-straggler.jsonl"
# The fabric: all_reduce at 2 ranks, 1 MB to 64 MB, under each setting (one variable changed).
grid() {  # NAME NP ENV...
  local name=$1 np=$2; shift 2
  el "fabric $name"
  timeout "$(left 60)" env "$@" "${mpirun[@]}" -np "$np" "$B/scalebench" comm --share-gpu --op all_reduce -b 1M -e 64M \
    -f 8 -n 10 --out "$R/fabric-$name.jsonl" >"$R/fabric-$name.log" 2>&1
  echo "   exit $?"; grep -E 'Avg bus bandwidth|^ +67108864 ' "$R/fabric-$name.log" | head -2
}
grid default 2
grid threads4-socks4 2 NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4
grid threads8-socks2 2 NCCL_SOCKET_NTHREADS=8 NCCL_NSOCKS_PERTHREAD=2
grid buffsize16M 2 NCCL_BUFFSIZE=16777216
grid ranks4 4
if command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$W/mps CUDA_MPS_LOG_DIRECTORY=$W/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    grid mps 2
    echo quit | nvidia-cuda-mps-control
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
else
  echo "fabric mps: skipped: no nvidia-cuda-mps-control"
fi
el "summary"
python3 results/h200-shared-gpu/summarize.py "$R" >"$O/b-summary.md" 2>"$R/summarize.err"; cat "$O/b-summary.md"
tar -czf "$O/b-records.tar.gz" -C "$W" records build.log
el "part b done"
