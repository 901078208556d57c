#!/usr/bin/env bash
# scalebench's ResNets against PyTorch (eager and torch.compile, channels_last, bf16 autocast,
# cuDNN with benchmark mode; tests/reference/bench_resnet_torch.py) on one GPU, in one command:
# `scalebench train` per preset, batch and convolution engine, then the torch runs at the same
# batches, then the side-by-side table with MFU. Everything lands in OUTDIR:
#   scalebench_<model>_<engine>_b<batch>.{jsonl,txt}, torch.{jsonl,txt}, table.md
#   launch/bench_resnet.sh [OUTDIR]
# Environment: BUILD (a configured CUDA build directory, default build-gpu, built here when it
# has no CMakeCache.txt), RUNS (model:batch list, default "resnet50:256 resnet152:128"), ENGINES
# (default "cudnn im2col"), STEPS (default 20), WARMUP (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/resnet-$(hostname -s)-$(date -u +%Y%m%d)}
build=${BUILD:-build-gpu}
runs=${RUNS:-"resnet50:256 resnet152:128"}
engines=${ENGINES:-"cudnn im2col"}
steps=${STEPS:-20}
warmup=${WARMUP:-5}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
root_flags=()
[[ $EUID -eq 0 ]] && root_flags=(--allow-run-as-root)
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/build.log" 2>&1
  cmake --build "$build" -j"$(nproc)" --target scalebench >>"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
fi

for spec in $runs; do
  model=${spec%%:*} batch=${spec#*:}
  for engine in $engines; do
    name=scalebench_${model}_${engine}_b${batch}
    echo "== scalebench train $model batch $batch, conv_engine $engine"
    rm -f "$out/$name.jsonl"
    # The preset with its engine; a failing run (out of memory, say) must not stop the others.
    sed "s/^conv_engine: .*//" "configs/$model.yaml" >"$out/$name.yaml"
    echo "conv_engine: $engine" >>"$out/$name.yaml"
    mpirun "${root_flags[@]}" -np 1 "$build/scalebench" train --config "$out/$name.yaml" --backend cuda --batch-size "$batch" --steps "$steps" \
        --warmup "$warmup" --scaling 1 --out "$out/$name.jsonl" >"$out/$name.txt" 2>&1 \
      && tail -2 "$out/$name.txt" || { echo "   failed; last lines:"; tail -5 "$out/$name.txt"; }
  done
  echo "== PyTorch $model batch $batch, eager and torch.compile"
  python3 tests/reference/bench_resnet_torch.py --model "$model" --run "eager:$batch" --run "compile:$batch" \
      --steps "$steps" --warmup "$warmup" --out "$out/torch.jsonl" >>"$out/torch.txt" 2>&1 \
    || { echo "   the torch script failed:"; tail -5 "$out/torch.txt"; }
done

echo "== side by side"
python3 tests/reference/bench_resnet_torch.py --table "$out" | tee "$out/table.md"
