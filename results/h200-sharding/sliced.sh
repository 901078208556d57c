#!/usr/bin/env bash
# The SharedGpuSharding tests with the ranks time-sliced on one GPU (no MPS daemon), where a
# 2-rank launch stops in the bf16 BERT case with NCCL's socket transport reporting a message
# of another size than the receiver expected. One call each, from any folder:
#   OUT=/some/folder results/h200-sharding/sliced.sh [defaults]
# Builds scalebench_gpu_tests (sm_90). Without an argument, runs the tests at 2 ranks with NCCL
# making connections at a collective's first use (NCCL_RUNTIME_CONNECT=1, NCCL's own default)
# under settings that each change one thing (each launch capped, a stop costing only its cap),
# and at 4 ranks:
#   coll      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL: every collective each rank issues, in order
#   sockets1  NCCL_SOCKET_NTHREADS=1 NCCL_NSOCKS_PERTHREAD=1 (NCCL's own, against --share-gpu's 4/4)
#   simple    NCCL_PROTO=Simple
#   connect0  NCCL_RUNTIME_CONNECT=0 (every connection made at init, none at a collective's first use)
#   alone     the bf16 BERT case alone (no fp32 case before it in the process)
#   np4       4 ranks
# With `defaults`, --share-gpu's settings as they stand (connections made at init): the
# SharedGpuSharding tests at 2 and 4 ranks, then every SharedGpu* test at 2 ranks.
# Writes $OUT/run.log (one line per launch: its exit status and the tests' verdicts) and
# $OUT/details.tar.gz (each launch's log, each rank's output and XML). LIMIT (default 540) caps the call.
set -uo pipefail
part=${1:-diagnosis}
[[ $part == diagnosis || $part == defaults ]] || { echo "sliced.sh: '$part': expected defaults or nothing" >&2; exit 2; }
O=$(realpath -m "${OUT:?OUT: the folder the results go to}")
mkdir -p "$O" || exit 2
cd "$(dirname "$0")/../.." || exit 2
B=build-gpu
W=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 SCALEBENCH_COLLECTIVE_TIMEOUT_S=30
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { local l=$(( ${LIMIT:-540} - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
mpirun=(mpirun --bind-to none --oversubscribe); [[ $EUID -eq 0 ]] && mpirun+=(--allow-run-as-root)
exec > >(tee "$O/run.log") 2>&1
trap 'tar -czf "$O/details.tar.gz" -C "$W" .; rm -rf "$W"; el done' EXIT
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nvidia-smi -q | grep -i "compute mode"

el build
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
  cmake --build "$B" -j"$(nproc)" --target scalebench_gpu_tests; } >"$W/build.log" 2>&1 || { tail -30 "$W/build.log"; exit 1; }

launch() {  # NAME NP SECONDS FILTER [VAR=VALUE...]
  local name=$1 np=$2 limit=$3 filter=$4; shift 4
  el "$name: -np $np $* ($filter)"
  env "$@" timeout "$(left "$limit")" "${mpirun[@]}" -np "$np" --output-filename "$W/$name-output" bash -c \
    'dir=$1; name=$2; shift 2; exec "$@" --gtest_output="xml:$dir/$name-rank${OMPI_COMM_WORLD_RANK:-0}.xml"' _ \
    "$W" "$name" "$B/tests/scalebench_gpu_tests" --gtest_filter="$filter" >"$W/$name.log" 2>&1
  echo "   exit $?: $(grep -cE '\[       OK' "$W/$name.log") OK, $(grep -cE '\[  FAILED  \].*\(' "$W/$name.log") failed;" \
    "last started: $(grep -E '\[ RUN' "$W/$name.log" | tail -1 | sed 's/.*RUN *\] *//')"
  grep -h "NCCL WARN" -r "$W/$name-output" "$W/$name.log" 2>/dev/null | sort -u | head -3
}
all='*SharedGpuSharding*'
if [[ $part == defaults ]]; then
  launch defaults-np2 2 60 "$all"
  launch defaults-np4 4 70 "$all"
  launch suite-np2 2 150 '*SharedGpu*'
  exit 0
fi
lazy=NCCL_RUNTIME_CONNECT=1
launch coll 2 50 "$all" $lazy NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL
launch sockets1 2 60 "$all" $lazy NCCL_SOCKET_NTHREADS=1 NCCL_NSOCKS_PERTHREAD=1
launch simple 2 60 "$all" $lazy NCCL_PROTO=Simple
launch connect0 2 60 "$all" NCCL_RUNTIME_CONNECT=0
launch alone 2 45 '*SharedGpuSharding*bert_bf16_optimizer' $lazy NCCL_DEBUG=WARN
launch np4 4 70 "$all" $lazy NCCL_DEBUG=WARN
exit 0
