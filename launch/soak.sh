#!/usr/bin/env bash
# The seed's soak: `scalebench stress` alternating ResNet-152 (configs/resnet152.yaml, bf16,
# batch 128 per GPU) and BERT-large (configs/bert-large.yaml, bf16, batch 32 per GPU) interval by
# interval on every GPU of the node, with the replica check every 100 steps (the configs' own).
#   launch/soak.sh [-n NP] [--duration 72h] [--interval 30m] [--out FILE] [--bin PATH] [--dry-run]
set -euo pipefail
source "$(dirname "$0")/options.sh"
np="" duration=72h interval=30m out="" bin=build/scalebench dry=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n|--np) needs_value soak.sh "$@"; np="$2"; shift 2 ;;
    --duration) needs_value soak.sh "$@"; duration="$2"; shift 2 ;;
    --interval) needs_value soak.sh "$@"; interval="$2"; shift 2 ;;
    -o|--out) needs_value soak.sh "$@"; out="$2"; shift 2 ;;
    --bin) needs_value soak.sh "$@"; bin="$2"; shift 2 ;;
    --dry-run) dry=echo; shift ;;
    -h|--help) sed -n 2,5p "$0"; exit 0 ;;
    *) echo "launch/soak.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# Paths given relative to where the script was started, though it runs from the repository root.
[[ -z "$out" ]] || out=$(absolute_path "$out")
[[ $bin == build/scalebench ]] || bin=$(absolute_path "$bin")
cd "$(dirname "$0")/.."
if [[ -n "$np" ]]; then whole_count soak.sh -n "$np"; fi
if [[ -z "$np" ]]; then
  np=$(nvidia-smi --list-gpus 2>/dev/null | wc -l || true)
  [[ "$np" -gt 0 ]] || { echo "launch/soak.sh: no GPU listed by nvidia-smi; give -n NP" >&2; exit 2; }
fi
[[ -n "$out" ]] || out="runs/soak-$(hostname -s)-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
$dry mpirun -np "$np" --bind-to none -x NCCL_NVLS_ENABLE "$bin" stress --duration "$duration" \
  --interval "$interval" --config configs/resnet152.yaml,configs/bert-large.yaml --out "$out"
