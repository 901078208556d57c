#!/usr/bin/env bash
# One call: build, attention/transformer GPU tests, side-by-side bench, op profiles, PyTorch checks.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O/bench $O/check
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
el build
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >$O/build.log 2>&1
cmake --build build-gpu -j16 --target scalebench scalebench_gpu_tests scalebench_export_step >>$O/build.log 2>&1 || { tail -30 $O/build.log; exit 1; }
el tests
timeout 150 build-gpu/tests/scalebench_gpu_tests --gtest_filter='*Attention*:TransformerOps*:CudaTransformerStep*:CudaGraphs*:CudaOpProfile*' >$O/gpu_tests.log 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" $O/gpu_tests.log | head -20
el bench
RUNS="${RUNS:-bert-base:32,256 gpt2-small:8}" STEPS=${STEPS:-15} WARMUP=5 timeout 330 launch/bench_transformer.sh $O/bench 2>&1 | tail -25
el profiles
for spec in bert-base:256 gpt2-small:8; do p=${spec%%:*}; b=${spec#*:}
  timeout 40 build-gpu/scalebench train --config configs/$p.yaml --backend cuda --precision bf16 --batch-size $b --steps 5 --warmup 2 --scaling 1 --profile-ops $O/check/opprof_${p}_b$b.jsonl --out $O/check/train_${p}_b$b.jsonl >$O/check/opprof_${p}_b$b.txt 2>&1; echo "$p rc=$?"
done
el torch-check
for p in gpt2-small bert-base; do
  timeout 60 build-gpu/tests/scalebench_export_step --config configs/$p.yaml --backend cuda --precision bf16 --batch 8 --dir /tmp/ref-$p >$O/check/export_$p.log 2>&1 &&
  timeout 90 python3 tests/reference/torch_transformer_check.py /tmp/ref-$p --json $O/check/torch_check_${p}_bf16.json >$O/check/torch_check_${p}_bf16.txt 2>&1; echo "$p check rc=$?"; tail -3 $O/check/torch_check_${p}_bf16.txt
done
el done
cd $O && tar czf check.tgz check && rm -rf check && tar czf bench.tgz bench && rm -rf bench
