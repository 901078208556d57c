#!/usr/bin/env bash
# The sharded modes' collective bytes on CPU ranks (MPI), for the projection's check that it moves
# what the runner moves (tests/unit/test_sharded_projection.cpp) and that train predicts its memory. Odd world sizes and small
# buckets, so most buckets are padded. From the repository root, with a CPU build in BUILD
# (default build-cpu): results/cpu-2rank-vm/sharding/run.sh [OUT_FOLDER, default runs/cpu-sharding]
set -euo pipefail
B=${BUILD:-build-cpu}
OUT=${1:-runs/cpu-sharding}
mkdir -p "$OUT"
mpirun=(mpirun --bind-to none --oversubscribe); [[ $EUID -eq 0 ]] && mpirun+=(--allow-run-as-root)
out="$OUT/records.jsonl"
rm -f "$out"
run() {  # NP ARGS...
  local np=$1; shift
  "${mpirun[@]}" -np "$np" "$B/scalebench" train --backend cpu --steps 2 --warmup 1 --out "$out" "$@"
}
run 3 --config configs/ci-small.yaml --sharding optimizer --scaling 2,3 --bucket-mb 0.01
run 3 --config configs/ci-transformer.yaml --sharding gradients --scaling 3 --bucket-mb 0.01
run 4 --config configs/ci-transformer.yaml --sharding optimizer --scaling 4
run 3 --config configs/ci-resnet.yaml --sharding gradients --scaling 3 --bucket-mb 0.02
run 3 --config configs/ci-transformer.yaml --sharding parameters --scaling 3 --bucket-mb 0.01
run 2 --config configs/ci-small.yaml --sharding none --scaling 2
echo "wrote $out"
