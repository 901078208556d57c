#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/maxpool-registers/run.sh OUTDIR
# Builds scalebench and its GPU tests (CUDA, cuDNN) while torch.compile fills its on-disk cache
# for bert-large b256 and ResNet-50 b256; meanwhile (correctness, nothing timed) the whole GPU
# suite and ResNet-50 b256's op profile (the max pool). When the caches are warm, nothing else
# running: bert-large beside PyTorch eager and torch.compile (launch/bench_transformer.sh), then
# ResNet-50 on both convolution engines beside them (launch/bench_resnet.sh).
set -uo pipefail
O=${1:?output folder}
B=build-gpu
mkdir -p "$O/bench" "$O/bench_resnet" "$O/check"
trap '(cd "$O" && for d in check bench bench_resnet; do [[ -d $d ]] && tar czf $d.tgz $d && rm -rf $d; done)' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# Seconds left of the call's 470, capped at $1: no stage runs past it, so the trap still packs the folders.
left() { local l=$(( 470 - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
python3 tests/reference/bench_bert_torch.py --run bert-large:compile:256 --steps 1 --warmup 1 \
    --out /tmp/torch_warm.jsonl >"$O/check/torch_warm_bert-large.txt" 2>&1 &
warm_bert=$!
python3 tests/reference/bench_resnet_torch.py --model resnet50 --run compile:256 --steps 1 --warmup 1 \
    --out /tmp/torch_warm.jsonl >"$O/check/torch_warm_resnet50.txt" 2>&1 &
warm_resnet=$!
el build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/build.log" 2>&1
nice cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests >>"$O/build.log" 2>&1 ||
    { tail -30 "$O/build.log"; exit 1; }
el "GPU suite"
timeout "$(left 150)" "$B/tests/scalebench_gpu_tests" >"$O/gpu_tests.log" 2>&1
echo "   exit $?"; grep -E '^\[  (PASSED|FAILED) ' "$O/gpu_tests.log" | head -12
el "op profile resnet50 b256"
timeout "$(left 45)" mpirun "${root[@]}" -np 1 "$B/scalebench" train --config configs/resnet50.yaml --backend cuda \
    --precision bf16 --batch-size 256 --steps 5 --warmup 2 --scaling 1 \
    --profile-ops "$O/check/opprof_resnet50_cudnn_b256.jsonl" --out "$O/check/train_resnet50_cudnn_b256.jsonl" \
    >"$O/check/opprof_resnet50_cudnn_b256.txt" 2>&1 || tail -5 "$O/check/opprof_resnet50_cudnn_b256.txt"
grep -E '^maxpool' "$O/check/opprof_resnet50_cudnn_b256.txt"
el "waiting for torch.compile's caches"
wait $warm_bert $warm_resnet
el "bert-large beside PyTorch"
RUNS="bert-large:32,256" STEPS=15 WARMUP=5 timeout "$(left 150)" launch/bench_transformer.sh "$O/bench" 2>&1 | tail -6
el "ResNet-50 beside PyTorch"
BUILD=$B RUNS="resnet50:256" STEPS=20 WARMUP=5 timeout "$(left 140)" launch/bench_resnet.sh "$O/bench_resnet" 2>&1 | tail -6
cat "$O/bench/table.md" "$O/bench_resnet/table.md" >"$O/table.md" 2>/dev/null
el done
