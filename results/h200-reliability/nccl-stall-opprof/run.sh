#!/usr/bin/env bash
# Remakes this folder on one GPU (the committed records: one H200, see README.md), from the
# repository root:
#   results/h200-reliability/nccl-stall-opprof/run.sh OUT [PARTS]   PARTS: any of suite faults checks opprof (default all)
# suite: the GPU suite. faults: the NCCL stall test (tests/faults/nccl_stall_probe.cpp, through
# the e2e tests NcclFaults*). checks: `scalebench_export_step` then the PyTorch gradient check
# (tests/reference/torch_transformer_check.py) of bert-base and gpt2-small in fp32 and bf16.
# opprof: `train --profile-ops` of mlp-large, bert-base (256 and 32), bert-large (32) and gpt2-small (8).
# Copy OUT's files over this folder's to replace the records, then run results/tables.py.
set -uo pipefail
O=${1:?output folder}
parts=${2:-"suite faults checks opprof"}
B=${BUILD:-build-gpu}
mkdir -p "$O/opprof"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
cmake --build "$B" -j"$(nproc)" \
    --target scalebench scalebench_gpu_tests scalebench_e2e_tests scalebench_export_step nccl_stall_probe \
    >>"$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
if [[ " $parts " == *" suite "* ]]; then
  mpirun "${root[@]}" -np 1 "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
  echo "GPU suite exit $?"
fi
if [[ " $parts " == *" faults "* ]]; then
  "$B/tests/scalebench_e2e_tests" --gtest_filter='NcclFaults*' >"$O/nccl_faults.log" 2>&1
  echo "NCCL stall test exit $?"
  # The probe's record and errors, from the test's scratch folder.
  scratch=$(ls -td "${TMPDIR:-/tmp}"/scalebench-nccl-faults-* 2>/dev/null | head -1)  # the newest
  [[ -n $scratch ]] && cp "$scratch/stall.jsonl" "$O/nccl_stall.jsonl" && cp "$scratch/stall.err" "$O/nccl_stall.err"
fi
if [[ " $parts " == *" checks "* ]]; then
  for p in bert-base gpt2-small; do
    for precision in fp32 bf16; do
      "$B/tests/scalebench_export_step" --config "configs/$p.yaml" --backend cuda --precision "$precision" --batch 8 \
          --dir "/tmp/ref-$p-$precision" >"$O/export_${p}_$precision.log" 2>&1 &&
        python3 tests/reference/torch_transformer_check.py "/tmp/ref-$p-$precision" \
          --json "$O/torch_check_${p}_$precision.json" >"$O/torch_check_${p}_$precision.txt" 2>&1
      echo "PyTorch check $p $precision: exit $?"
    done
  done
fi
if [[ " $parts " == *" opprof "* ]]; then
  for spec in mlp-large: bert-base:256 bert-base:32 bert-large:32 gpt2-small:8; do
    p=${spec%%:*} b=${spec#*:}
    batch=(); [[ -n $b ]] && batch=(--batch-size "$b")
    mpirun "${root[@]}" -np 1 "$B/scalebench" train --config "configs/$p.yaml" --precision bf16 "${batch[@]}" \
        --out "$O/opprof/train.jsonl" --profile-ops "$O/opprof/ops.jsonl" >"$O/opprof/${p}${b:+_b$b}.txt" 2>&1
    echo "op profile $p${b:+ batch $b}: exit $?"
  done
fi
