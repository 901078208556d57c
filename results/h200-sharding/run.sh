#!/usr/bin/env bash
# Sharded data parallel on one H200 (docs/sharding.md), ranks sharing the GPU (--share-gpu), in two
# calls of under 9 minutes each, from any folder:  OUT=/some/folder results/h200-sharding/run.sh [parameters]
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
# Writes to $OUT: run.log, summary.md (summarize.py: PASS or FAIL per requirement, then the tables)
# and details.tar.gz (every record and log). LIMIT (default 520) caps the call's seconds.
set -uo pipefail
part=${1:-all}
[[ $part == all || $part == parameters ]] || { echo "run.sh: '$part': expected parameters or nothing" >&2; exit 2; }
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
  python3 results/h200-sharding/summarize.py "$R" >"$O/summary.md" 2>"$W/summarize.err" || cat "$W/summarize.err"
  cat "$O/summary.md"
  tar -czf "$O/details.tar.gz" -C "$W" .
  rm -rf "$W"
  el done
}
trap pack EXIT
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

el build
targets=(scalebench); [[ $part == parameters ]] && targets+=(scalebench_gpu_tests)
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
if [[ $part == parameters ]]; then
  for mode in gradients parameters; do  # ZeRO-3 takes longer over this fabric: gathers in both passes
    sb "large-$mode-79" 200 2 train --config configs/gpt2-large.yaml --share-gpu --sharding "$mode" --batch-size 2 \
      --bucket-mb 79 --scaling 2 --steps 4 --warmup 2 --out "$R/large.jsonl"
  done
  peer gradients parameters
  # In what the call has left, as the GPU suite runs its SharedGpu* tests (launch/multi_gpu_plan.sh):
  # the ranks clients of an MPS daemon of this call's own. Each rank's results in its own XML and its
  # output in its own file; a collective that stalls ends the launch within 30 s naming itself.
  gtests() {  # NAME NP SECONDS
    el "SharedGpuSharding tests: $1"
    SCALEBENCH_COLLECTIVE_TIMEOUT_S=30 timeout "$(left "$3")" "${mpirun[@]}" -np "$2" \
      --output-filename "$R/$1-output" bash -c \
      'dir=$1; name=$2; shift 2; exec "$@" --gtest_output="xml:$dir/$name-rank${OMPI_COMM_WORLD_RANK:-0}.xml"' _ \
      "$R" "$1" "$B/tests/scalebench_gpu_tests" --gtest_filter='*SharedGpuSharding*' >"$R/$1.log" 2>&1
    echo "   exit $?"; grep -E 'PASSED|FAILED' "$R/$1.log" | head -8
  }
  mps=$(mktemp -d /tmp/sb-mps.XXXXXX)
  export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && el "MPS daemon started" || el "no MPS daemon: the ranks time-slice the GPU"
  gtests gtest-np2 2 120
  gtests gtest-np4 4 120
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  # Outside the verdicts: 2 ranks time-sliced, where a launch without MPS stopped in the bf16 BERT.
  (( $(left 60) >= 60 )) && NCCL_DEBUG=WARN gtests sliced-np2 2 100
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
