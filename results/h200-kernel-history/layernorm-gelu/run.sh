#!/usr/bin/env bash
# The command behind this folder's files, run from the repository root on one H200:
#   results/h200-kernel-history/layernorm-gelu/run.sh OUTDIR [CANDIDATE]
# Builds scalebench, its GPU tests and the step exporter (CUDA, cuDNN) here and, given CANDIDATE
# (another tree of the repository), there too, while torch.compile fills its on-disk cache for
# bert-base, gpt2-small and gpt2-medium. Meanwhile (correctness, nothing timed): the whole GPU
# suite on the candidate; the candidate's tree is used below when it passes, this tree (after its
# own suite) when not (used.txt says which). Then the op profiles (device time of each op alone)
# of ResNet-50 b256 (cuDNN engine), gpt2-medium b8 and bert-base b256; when the caches are warm,
# nothing else running: the transformer presets beside PyTorch eager and torch.compile
# (launch/bench_transformer.sh); the PyTorch checks (ResNet-50 fp32/bf16/fp16, bert-base and
# gpt2-small bf16); ResNet-50 beside PyTorch while time is left.
set -uo pipefail
O=${1:?output folder}
CAND=${2:-}
B=build-gpu
mkdir -p "$O/bench" "$O/check"
trap '(cd "$O" && for d in check bench bench_resnet; do [[ -d $d ]] && tar czf $d.tgz $d && rm -rf $d; done)' EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# Seconds left of the call's 545, capped at $1: no stage runs past it, so the trap still packs the folders.
left() { local l=$(( 545 - ($(date +%s) - T0) )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
root=(); [[ $EUID -eq 0 ]] && root=(--allow-run-as-root)
nvidia-smi >"$O/nvidia-smi.txt" 2>&1
warm=()
for run in gpt2-medium:compile:8 bert-base:compile:256 gpt2-small:compile:8; do
  python3 tests/reference/bench_bert_torch.py --run "$run" --steps 1 --warmup 1 --out /tmp/torch_warm.jsonl \
      >"$O/check/torch_warm_${run%%:*}.txt" 2>&1 &
  warm+=($!)
done
build() {  # tree log
  (cd "$1" && cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
     nice cmake --build "$B" -j"$(nproc)" --target scalebench scalebench_gpu_tests scalebench_export_step) >"$2" 2>&1
}
el build
[[ -n $CAND ]] && { build "$CAND" "$O/check/candidate_build.log" & cand_build=$!; }
build . "$O/build.log" || { tail -30 "$O/build.log"; exit 1; }
suite() {  # tree log
  timeout "$(left 150)" "$1/$B/tests/scalebench_gpu_tests" >"$2" 2>&1
  local rc=$?
  echo "   exit $rc"; grep -E '^\[  (PASSED|FAILED) ' "$2" | head -12
  return $rc
}
S=.
if [[ -n $CAND ]] && wait $cand_build; then
  el "GPU suite on the candidate"
  suite "$CAND" "$O/gpu_tests.log" && S=$CAND
fi
if [[ $S == . ]]; then
  [[ -n $CAND ]] && mv "$O/gpu_tests.log" "$O/candidate_gpu_tests.log" 2>/dev/null
  el "GPU suite"
  suite . "$O/gpu_tests.log"
fi
echo "tree used for the profiles, the side by side and the checks: $S" | tee "$O/used.txt"
opprof() {  # tag config batch
  el "op profile $1"
  timeout "$(left 45)" mpirun "${root[@]}" -np 1 "$S/$B/scalebench" train --config "$2" --backend cuda --precision bf16 \
      --batch-size "$3" --steps 5 --warmup 2 --scaling 1 --profile-ops "$O/check/opprof_$1.jsonl" \
      --out "$O/check/train_$1.jsonl" >"$O/check/opprof_$1.txt" 2>&1 || tail -5 "$O/check/opprof_$1.txt"
  sed -n 4p "$O/check/opprof_$1.txt"; grep -E '^(maxpool|residual_layernorm|attention_backward|labelled_bias_grad|activation_backward 32768x3072)' "$O/check/opprof_$1.txt"
}
opprof resnet50_cudnn_b256 configs/resnet50.yaml 256
opprof gpt2-medium_b8 configs/gpt2-medium.yaml 8
opprof bert-base_b256 configs/bert-base.yaml 256
el "waiting for torch.compile's caches"
wait "${warm[@]}"
el "transformers beside PyTorch"
(cd "$S" && RUNS="bert-base:32,256 gpt2-small:8 gpt2-medium:8" STEPS=15 WARMUP=5 timeout "$(left 240)" \
    launch/bench_transformer.sh "$O/bench" 2>&1 | tail -10)
cp "$O/bench/table.md" "$O/table.md" 2>/dev/null
check() {  # preset precision batch [export flags]
  local p=$1 prec=$2 b=$3; shift 3
  el "PyTorch check $p $prec"
  timeout "$(left 40)" "$S/$B/tests/scalebench_export_step" --config "configs/$p.yaml" --backend cuda --precision "$prec" \
      --batch "$b" "$@" --dir "/tmp/ref-$p-$prec" >"$O/check/export_${p}_$prec.log" 2>&1 &&
    timeout "$(left 90)" python3 tests/reference/torch_transformer_check.py "/tmp/ref-$p-$prec" \
      --json "$O/check/torch_check_${p}_$prec.json" >"$O/check/torch_check_${p}_$prec.txt" 2>&1
  echo "   exit $?"; tail -1 "$O/check/torch_check_${p}_$prec.txt"
}
for prec in fp32 bf16 fp16; do check resnet50 "$prec" 16 --perturb 0.05; done
check bert-base bf16 8
check gpt2-small bf16 8
if (( $(left 200) > 150 )); then
  el "ResNet-50 beside PyTorch"
  mkdir -p "$O/bench_resnet"
  BUILD=$B RUNS="resnet50:256" STEPS=20 WARMUP=5 timeout "$(left 150)" launch/bench_resnet.sh "$O/bench_resnet" 2>&1 | tail -5
  cat "$O/bench_resnet/table.md" >>"$O/table.md" 2>/dev/null
fi
el done
