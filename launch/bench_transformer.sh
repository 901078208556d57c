#!/usr/bin/env bash
# scalebench against PyTorch (Hugging Face transformers, eager and torch.compile) on the
# transformer presets, one command on one GPU. Builds scalebench with CUDA, runs
# `scalebench train` per preset and batch (bf16), then tests/reference/bench_bert_torch.py on
# the same models and batches, and prints the side-by-side table. Everything lands in OUTDIR:
#   build.log, scalebench_<preset>_b<batch>.{jsonl,txt}, torch.{jsonl,txt}, table.md
#   launch/bench_transformer.sh [OUTDIR]
# Environment: STEPS (measured steps, default 20), WARMUP (default 5), RUNS (preset:batches
# list, default "bert-base:32,256 bert-large:32,256 gpt2-small:8,32"), COMPILE_AT (which
# batch of each preset torch.compile runs at: "large", the default, or "all"), WHAT (all,
# scalebench or torch). About 8 minutes on an H100/H200, most of it torch.compile's compile
# time; to stay under a time limit, split it over calls with the same OUTDIR (e.g. RUNS=
# "bert-base:32,256" then RUNS="bert-large:32,256 gpt2-small:8,32"): torch.jsonl is appended
# to and the table takes the latest record of each run.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/transformer-$(hostname -s)-$(date -u +%Y%m%d)}
steps=${STEPS:-20}
warmup=${WARMUP:-5}
runs=${RUNS:-"bert-base:32,256 bert-large:32,256 gpt2-small:8,32"}
compile_at=${COMPILE_AT:-large}
what=${WHAT:-all}
mkdir -p "$out"
# Never NVLink multicast on shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
root_flags=()
[[ $EUID -eq 0 ]] && root_flags=(--allow-run-as-root)

if [[ $what != torch ]]; then
  echo "== build (build-gpu)"
  if [[ ! -f build-gpu/CMakeCache.txt ]]; then
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON \
          -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" >"$out/build.log" 2>&1
  fi
  cmake --build build-gpu -j"$(nproc)" --target scalebench >>"$out/build.log" 2>&1 \
    || { tail -40 "$out/build.log"; exit 1; }
fi
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true

torch_runs=()
for spec in $runs; do
  preset=${spec%%:*}
  IFS=, read -r -a batches <<<"${spec#*:}"
  for b in "${batches[@]}"; do
    torch_runs+=(--run "$preset:eager:$b")
    if [[ $what == torch ]]; then continue; fi
    echo "== scalebench train $preset batch $b"
    rm -f "$out/scalebench_${preset}_b${b}.jsonl"
    # One failing preset (e.g. out of memory) must not stop the others.
    mpirun "${root_flags[@]}" -np 1 build-gpu/scalebench train --config "configs/$preset.yaml" --backend cuda \
        --precision bf16 --batch-size "$b" --steps "$steps" --warmup "$warmup" --scaling 1 \
        --out "$out/scalebench_${preset}_b${b}.jsonl" >"$out/scalebench_${preset}_b${b}.txt" 2>&1 \
      && tail -3 "$out/scalebench_${preset}_b${b}.txt" \
      || { echo "   failed; last lines:"; tail -5 "$out/scalebench_${preset}_b${b}.txt"; }
  done
  last=${batches[${#batches[@]}-1]}
  for b in "${batches[@]}"; do
    if [[ $compile_at == all || $b == "$last" ]]; then torch_runs+=(--run "$preset:compile:$b"); fi
  done
done

if [[ $what != scalebench ]]; then
  echo "== PyTorch (transformers), eager and torch.compile"
  python3 tests/reference/bench_bert_torch.py "${torch_runs[@]}" --steps "$steps" --warmup "$warmup" \
      --out "$out/torch.jsonl" 2>&1 | tee -a "$out/torch.txt" || echo "   the torch script failed (see torch.txt)"
fi

echo "== side by side"
python3 tests/reference/bench_bert_torch.py --table "$out" | tee "$out/table.md"
