#!/usr/bin/env bash
# Remakes this folder on one GPU (the committed records: one H200, see README.md), from the
# repository root:
#   results/h200-reliability/comm-stress/run.sh OUT [PARTS]     PARTS: any of suite stress comm (default all three)
# suite: the GPU suite. stress: the soak of mlp-large and bert-base with replica checks on the
# device (stress.{log,jsonl}; stress_host_checksum.* holds the host-side checksum of an earlier
# tree, which the current code no longer has, so it is kept as it is and not remade).
# comm: for each collective in OPS, `scalebench comm` and NVIDIA nccl-tests' OP_perf with the same
# sweep, alternated RUNS times, then tests/reference/compare_nccl_tests.py over them. nccl-tests
# is not fetched: build it from its public source (v2.19.6: make CUDA_HOME=/usr/local/cuda
# NCCL_HOME=...) and give its build folder as NCCL_TESTS.
# Copy OUT's files over this folder's to replace the records, then run results/tables.py.
set -uo pipefail
O=${1:?output folder}
parts=${2:-"suite stress comm"}
B=${BUILD:-build-gpu}
ops=${OPS:-"all_reduce all_gather reduce_scatter broadcast reduce"}
runs=${RUNS:-5}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests >>"$O/build.log" 2>&1 ||
  { tail -30 "$O/build.log"; exit 1; }
if [[ " $parts " == *" suite "* ]]; then
  mpirun "${root[@]}" -np 1 "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
  echo "GPU suite exit $?"
fi
if [[ " $parts " == *" stress "* ]]; then
  mpirun "${root[@]}" -np 1 "$B/scalebench" stress --duration 150s --interval 30s \
      -c configs/mlp-large.yaml,configs/bert-base.yaml --backend cuda --precision bf16 --sdc-check-every 50 \
      --out "$O/stress.jsonl" >"$O/stress.log" 2>&1
  echo "stress exit $?"
fi
if [[ " $parts " == *" comm "* ]]; then
  : "${NCCL_TESTS:?give NCCL_TESTS, the build folder of nccl-tests (its OP_perf programs)}"
  sweep=(-b 8 -e 256M -f 2 -n 50 -w 10)
  for op in $ops; do
    for i in $(seq 1 "$runs"); do
      mpirun "${root[@]}" -np 1 "$B/scalebench" comm --backend nccl --op "$op" "${sweep[@]}" --out "$O/comm.jsonl" \
          >"$O/comm_${op}_scalebench_$i.txt" 2>&1
      "$NCCL_TESTS/${op}_perf" "${sweep[@]}" >"$O/comm_${op}_nccl_tests_$i.txt" 2>&1
    done
    python3 tests/reference/compare_nccl_tests.py --scalebench "$O"/comm_"${op}"_scalebench_*.txt \
        --nccl-tests "$O"/comm_"${op}"_nccl_tests_*.txt --out "$O/comm_vs_nccl_tests.jsonl" \
        >"$O/comm_${op}_compare.txt" 2>&1
    echo "$op against nccl-tests: exit $?"
  done
fi
