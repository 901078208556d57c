#!/usr/bin/env bash
# Remakes this folder's records on a CPU machine (the committed ones: a 2-core VM, see README.md):
# the two-rank curve of the built-in workload and of configs/ci-small.yaml, the 0.5 MB-bucket run,
# `comm` on MPI with its printed table, and the plots. From the repository root, after
# launch/build.sh:
#   results/cpu-2rank-vm/run.sh [OUT]     (default runs/cpu-2rank-vm)
# OUT is written afresh; copy its files over this folder's to replace the records, then run
# results/tables.py (the README's quick-start table reads train.jsonl).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/cpu-2rank-vm}
rm -rf "$out"
mkdir -p "$out/plots"
mpi=(mpirun --oversubscribe -np 2)
[[ $EUID -eq 0 ]] && mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
"${mpi[@]}" build/scalebench --scaling 1,2 --out "$out/default.jsonl"
"${mpi[@]}" build/scalebench --scaling 1,2 --config configs/ci-small.yaml --out "$out/ci-small.jsonl"
cat "$out/default.jsonl" "$out/ci-small.jsonl" >"$out/train.jsonl"
"${mpi[@]}" build/scalebench --scaling 2 --bucket-mb 0.5 --out "$out/train_bucket_0.5mb.jsonl"
# Comm cost against the no-communication steps, a communication delay and a straggler made on purpose.
"${mpi[@]}" build/scalebench train --scaling 1,2 --out "$out/multirank-train.jsonl"
SCALEBENCH_TEST_COMM_DELAY=1:40 "${mpi[@]}" build/scalebench train --config configs/ci-small.yaml --backend cpu \
  --scaling 1,2 --steps 10 --out "$out/multirank-comm-delay.jsonl"
SCALEBENCH_TEST_DELAY_RANK=1:20 "${mpi[@]}" build/scalebench train --config configs/ci-small.yaml --backend cpu \
  --scaling 2 --steps 12 --out "$out/multirank-straggler.jsonl"
"${mpi[@]}" build/scalebench comm --backend mpi -b 8 -e 4M -f 4 --out "$out/comm.jsonl" | tee "$out/comm.txt"
# The plots of the built-in workload's curve.
/usr/bin/python3 results/plot_scaling.py "$out/default.jsonl" -o "$out/plots" --formats png
rm "$out/default.jsonl" "$out/ci-small.jsonl"
