#!/usr/bin/env bash
# Sharded data parallel on one H200 (docs/sharding.md), ranks sharing the GPU (--share-gpu), in
# calls of under 9 minutes each, from any folder:
#   OUT=/some/folder results/h200-sharding/run.sh [parameters | sliced | sliced-defaults]
#   (no argument)
#   1. build scalebench (CUDA, sm_90);
#   2. equivalence: each mode (parameters too) against the unsharded step, 2 and 4 ranks, fp32 and dropout 0 (the tiny
#      BERT of configs/ci-transformer.yaml and the tiny ResNet of configs/ci-resnet.yaml);
#   3. the refusal: GPT-2 XL at a batch whose replica does not fit a quarter of the GPU, unsharded;
#   4. GPT-2 large b2 bf16 at 2 ranks (4 ranks over the socket fabric take about 2 minutes a launch,
#      past the call), buckets of 25 MB (DDP's default): scalebench none / optimizer / gradients beside
#      PyTorch (tests/reference/fsdp_bench.py: DDP, DDP + ZeroRedundancyOptimizer, FSDP2 reshard False):
#      step, communication cost, memory per rank predicted and measured.
#   parameters
#   1. build scalebench and scalebench_gpu_tests;
#   2. GPT-2 large b2 bf16 at 2 ranks in buckets of 79 MB (one GPT-2 large block in fp32: FSDP2's
#      unit): scalebench gradients and parameters beside FSDP2 reshard False and True;
#   3. in what is left, the SharedGpuSharding tests at 2, then 4 ranks under an MPS daemon, as the
#      GPU suite runs them (each mode against the unsharded step in fp32 and bf16, memory per kind
#      as predicted), then at 2 ranks time-sliced, outside the verdicts.
#   sliced
#   1. build scalebench_gpu_tests;
#   2. the SharedGpuSharding tests with the ranks time-sliced (no MPS daemon), where a 2-rank launch
#      stops in the bf16 BERT case with NCCL's socket transport reporting a message of another size
#      than the receiver expected: at 2 ranks with NCCL making connections at a collective's first
#      use (NCCL_RUNTIME_CONNECT=1, NCCL's own default), each launch changing one thing (each capped,
#      a stop costing only its cap), and at 4 ranks:
#        coll      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL: every collective each rank issues, in order
#        sockets1  NCCL_SOCKET_NTHREADS=1 NCCL_NSOCKS_PERTHREAD=1 (NCCL's own, against --share-gpu's 4/4)
#        simple    NCCL_PROTO=Simple
#        connect0  NCCL_RUNTIME_CONNECT=0 (every connection made at init, none at a collective's first use)
#        alone     the bf16 BERT case alone (no fp32 case before it in the process)
#        np4       4 ranks
#   sliced-defaults
#   1. build scalebench_gpu_tests;
#   2. time-sliced, under --share-gpu's settings as they stand (connections made at init): the
#      SharedGpuSharding tests at 2 and 4 ranks, then every SharedGpu* test at 2 ranks.
# Writes to $OUT: run.log, summary.md (summarize.py: PASS or FAIL per requirement, then the tables;
# not for the sliced calls, whose verdicts are each launch's line in run.log) and details.tar.gz
# (every record and log, each test launch's per-rank output and XML). LIMIT (default 520) caps the
# call's seconds.
set -uo pipefail
part=${1:-all}
case $part in all|parameters|sliced|sliced-defaults) ;;
  *) echo "run.sh: '$part': expected parameters, sliced, sliced-defaults or nothing" >&2; exit 2 ;; esac
O=$(realpath -m "${OUT:?OUT: the folder the results go to}")
mkdir -p "$O" || exit 2
cd "$(dirname "$0")/../.." || exit 2
B=build-gpu
W=$(mktemp -d); R=$W/records; mkdir -p "$R"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { local l=$(( ${LIMIT:-520} - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
mpirun=(mpirun --bind-to none --oversubscribe); [[ $EUID -eq 0 ]] && mpirun+=(--allow-run-as-root)
exec > >(tee "$O/run.log") 2>&1
pack() {
  if [[ $part != sliced* ]]; then
    python3 results/h200-sharding/summarize.py "$R" >"$O/summary.md" 2>"$W/summarize.err" || cat "$W/summarize.err"
    cat "$O/summary.md"
  fi
  tar -czf "$O/details.tar.gz" -C "$W" .
  rm -rf "$W"
  el done
}
trap pack EXIT
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nvidia-smi -q | grep -i "compute mode"

el build
case $part in all) targets=(scalebench) ;; parameters) targets=(scalebench scalebench_gpu_tests) ;;
  *) targets=(scalebench_gpu_tests) ;; esac
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
  cmake --build "$B" -j"$(nproc)" --target "${targets[@]}"; } >"$W/build.log" 2>&1 || { tail -30 "$W/build.log"; exit 1; }
el "built: $(grep -c 'Building' "$W/build.log") compile steps"

sb() {  # NAME SECONDS NP ARGS...: scalebench under mpirun, log in $R/NAME.log, exit status in $R/NAME.rc
  local name=$1 limit=$2 np=$3; shift 3
  el "$name"
  timeout "$(left "$limit")" "${mpirun[@]}" -np "$np" "$B/scalebench" "$@" >"$R/$name.log" 2>&1
  echo $? >"$R/$name.rc"
  echo "   exit $(cat "$R/$name.rc")"; grep -E '^ +[0-9]+ |error|fits' "$R/$name.log" | head -6
}
peer() {  # MODE...: fsdp_bench.py at 2 ranks sharing the GPU, GPT-2 large b2
  local modes=(); for m in "$@"; do modes+=(--mode "$m"); done
  el "PyTorch: $* at 2 ranks sharing the GPU"
  timeout "$(left 200)" python3 -m torch.distributed.run --standalone --nproc_per_node 2 tests/reference/fsdp_bench.py \
    --share-gpu --workload gpt2-large:2 "${modes[@]}" --scaling 2 --steps 4 --warmup 2 --out "$R/peer.jsonl" \
    >>"$R/peer.log" 2>&1
  echo "   exit $?"; tail -4 "$R/peer.log"
}
# NAME NP SECONDS FILTER [VAR=VALUE...]: the GPU tests under mpirun, each rank's results in its own
# XML and its output in its own file; a collective that stalls ends the launch within 30 s naming
# itself. Prints the exit status, the tests passed and failed, the last one started and NCCL's warnings.
gtests() {
  local name=$1 np=$2 limit=$3 filter=$4; shift 4
  el "$name: -np $np $* ($filter)"
  env SCALEBENCH_COLLECTIVE_TIMEOUT_S=30 "$@" timeout "$(left "$limit")" "${mpirun[@]}" -np "$np" \
    --output-filename "$R/$name-output" bash -c \
    'dir=$1; name=$2; shift 2; exec "$@" --gtest_output="xml:$dir/$name-rank${OMPI_COMM_WORLD_RANK:-0}.xml"' _ \
    "$R" "$name" "$B/tests/scalebench_gpu_tests" --gtest_filter="$filter" >"$R/$name.log" 2>&1
  echo "   exit $?: $(grep -cE '\[       OK' "$R/$name.log") OK, $(grep -cE '\[  FAILED  \].*\(' "$R/$name.log") failed;" \
    "last started: $(grep -E '\[ RUN' "$R/$name.log" | tail -1 | sed 's/.*RUN *\] *//')"
  grep -h "NCCL WARN" -r "$R/$name-output" "$R/$name.log" 2>/dev/null | sort -u | head -3
}
sharding='*SharedGpuSharding*'
if [[ $part == sliced-defaults ]]; then
  gtests defaults-np2 2 60 "$sharding"
  gtests defaults-np4 4 70 "$sharding"
  gtests suite-np2 2 150 '*SharedGpu*'
  exit 0
fi
if [[ $part == sliced ]]; then
  lazy=NCCL_RUNTIME_CONNECT=1
  gtests coll 2 50 "$sharding" $lazy NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL
  gtests sockets1 2 60 "$sharding" $lazy NCCL_SOCKET_NTHREADS=1 NCCL_NSOCKS_PERTHREAD=1
  gtests simple 2 60 "$sharding" $lazy NCCL_PROTO=Simple
  gtests connect0 2 60 "$sharding" NCCL_RUNTIME_CONNECT=0
  gtests alone 2 45 '*SharedGpuSharding*bert_bf16_optimizer' $lazy NCCL_DEBUG=WARN
  gtests np4 4 70 "$sharding" $lazy NCCL_DEBUG=WARN
  exit 0
fi
if [[ $part == parameters ]]; then
  for mode in gradients parameters; do  # ZeRO-3 takes longer over this fabric: gathers in both passes
    sb "large-$mode-79" 200 2 train --config configs/gpt2-large.yaml --share-gpu --sharding "$mode" --batch-size 2 \
      --bucket-mb 79 --scaling 2 --steps 4 --warmup 2 --out "$R/large.jsonl"
  done
  peer gradients parameters
  # In what the call has left, as the GPU suite runs its SharedGpu* tests (launch/multi_gpu_plan.sh):
  # the ranks clients of an MPS daemon of this call's own.
  mps=$(mktemp -d /tmp/sb-mps.XXXXXX)
  export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && el "MPS daemon started" || el "no MPS daemon: the ranks time-slice the GPU"
  gtests gtest-np2 2 120 "$sharding"
  gtests gtest-np4 4 120 "$sharding"
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  # Outside the verdicts: 2 ranks time-sliced, where a launch without MPS stopped in the bf16 BERT
  # while NCCL made its connections at first use (the `sliced` part).
  (( $(left 60) >= 60 )) && gtests sliced-np2 2 100 "$sharding" NCCL_DEBUG=WARN
  exit 0
fi
for mode in none optimizer gradients parameters; do
  sb "equiv-transformer-$mode" 60 4 train --config configs/ci-transformer.yaml --share-gpu --precision fp32 \
    --sharding "$mode" --scaling 2,4 --steps 5 --warmup 1 --bucket-mb 0.01 --out "$R/equiv-transformer.jsonl"
done
for mode in none optimizer gradients parameters; do
  sb "equiv-resnet-$mode" 60 4 train --config configs/ci-resnet.yaml --share-gpu --precision fp32 \
    --sharding "$mode" --scaling 2,4 --steps 5 --warmup 1 --bucket-mb 0.05 --out "$R/equiv-resnet.jsonl"
done
# A replica of GPT-2 XL (18 bytes a parameter: 28 GB) and its activations exceed a quarter of the
# GPU at batch 5 on an H200 (35 GiB a rank) and at batch 3 on an H100 (19 GiB); sharded it fits
# (optimizer on the H200, parameters on the H100: `project --sharding MODE` gives the sizes):
# refused before any step, the message naming the sharding mode that fits.
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
xl_batch=$(( ${mib:-0} > 100000 ? 5 : 3 ))
sb refusal-xl-none 90 4 train --config configs/gpt2-xl.yaml --share-gpu --sharding none --batch-size "$xl_batch" \
  --scaling 4 --steps 2 --warmup 1 --out "$R/refusal.jsonl"
for mode in none optimizer gradients; do
  sb "large-$mode" 100 2 train --config configs/gpt2-large.yaml --share-gpu --sharding "$mode" --batch-size 2 \
    --scaling 2 --steps 4 --warmup 2 --out "$R/large.jsonl"
done

peer none optimizer gradients
exit 0  # the verdicts are in summary.md
