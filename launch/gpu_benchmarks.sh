#!/usr/bin/env bash
# Builds scalebench with CUDA and produces the GPU figures the README quotes, into
# OUTDIR (default runs/gpu-<host>-<date>): the GPU test-suite log, `scalebench gemm`
# beside torch.mm in the same command, the MLP training benchmark and an NCCL sweep.
#   launch/gpu_benchmarks.sh [OUTDIR] [all|tests|gemm|train|comm]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/gpu-$(hostname -s)-$(date -u +%Y%m%d)}
what=${2:-all}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}  # never NVLink multicast on shared hosts
root_flags=()
[[ $EUID -eq 0 ]] && root_flags=(--allow-run-as-root)
gpus=$(nvidia-smi -L | wc -l)

if [[ ! -x build-gpu/scalebench ]]; then
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" >"$out/build.log" 2>&1
fi
cmake --build build-gpu -j"$(nproc)" --target scalebench >>"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
nvidia-smi topo -m >>"$out/nvidia-smi.txt" 2>&1 || true

if [[ $what == all || $what == tests ]]; then
  echo "== GPU test suite on $gpus GPU(s)"
  cmake --build build-gpu -j"$(nproc)" --target scalebench_gpu_tests >>"$out/build.log" 2>&1 || tail -40 "$out/build.log"
  set +e
  mpirun "${root_flags[@]}" -np "$gpus" build-gpu/tests/scalebench_gpu_tests 2>&1 | tee "$out/gpu_tests.log" | tail -25
  set -e
fi
if [[ $what == all || $what == gemm ]]; then
  echo "== gemm: scalebench and torch.mm side by side"
  rm -f "$out/gemm.jsonl"
  build-gpu/scalebench gemm --out "$out/gemm.jsonl" | tee "$out/gemm.txt"
  python3 tests/reference/torch_mm.py --compare "$out/gemm.jsonl" | tee "$out/gemm_vs_torch.txt"
  # The GEMM shapes of configs/mlp-large.yaml's step (forward and dX M=1024, weight gradients
  # K=1024, the 1024-class last layer), for `scalebench project --calibrate`.
  rm -f "$out/gemm-shapes.jsonl"
  build-gpu/scalebench gemm --dtype bf16 --size 1024x8192x8192,8192x8192x1024,1024x1024x8192,1024x8192x1024 \
      --out "$out/gemm-shapes.jsonl" | tee "$out/gemm-shapes.txt"
fi
if [[ $what == all || $what == train ]]; then
  echo "== MLP training benchmark"
  rm -f "$out/mlp-large.jsonl"
  mpirun "${root_flags[@]}" -np "$gpus" build-gpu/scalebench train --config configs/mlp-large.yaml \
      --out "$out/mlp-large.jsonl" | tee "$out/mlp-large.txt"
fi
if [[ $what == all || $what == comm ]]; then
  echo "== comm: NCCL all-reduce sweep on $gpus GPU(s)"
  rm -f "$out/comm.jsonl"
  mpirun "${root_flags[@]}" -np "$gpus" build-gpu/scalebench comm --backend nccl --op all_reduce -b 8 -e 256M -f 2 \
      --out "$out/comm.jsonl" | tee "$out/comm.txt"
fi
