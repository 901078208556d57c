#!/usr/bin/env bash
# GPT-2 XL (configs/gpt2-xl.yaml, batch 2 per GPU, bf16, AdamW) projected at 8 GPUs per transport
# (NVLink: a100-sxm4-40gb; PCIe P2P: rtx4090-24gb-pcie4-p2p; host-staged: rtx4090-24gb-pcie4), each
# unsharded and in each sharded mode: what the sharded step's reduce-scatter and all-gather cost beside the
# all-reduce (docs/sharding.md renders the table). From the repository root, with a build in BUILD
# (default build): results/buyers-guide-a100-4090/sharding-projection/run.sh [OUT_FILE, default runs/sharding-projection.jsonl]
set -euo pipefail
B=${BUILD:-build}
out=${1:-runs/sharding-projection.jsonl}
mkdir -p "$(dirname "$out")"
rm -f "$out"
for hw in a100-sxm4-40gb rtx4090-24gb-pcie4-p2p rtx4090-24gb-pcie4; do
  for mode in none optimizer gradients parameters; do
    "$B/scalebench" project --hardware "$hw" --config configs/gpt2-xl.yaml --sharding "$mode" --scaling 8 --out "$out" >/dev/null
  done
done
echo "wrote $out"
