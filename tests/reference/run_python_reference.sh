#!/usr/bin/env bash
# CTest driver: exports configs/ci-transformer.yaml (BERT) and its GPT twin on the CPU and
# checks each loss against tests/reference/python_transformer_reference.py.
# Usage: run_python_reference.sh EXPORTER SOURCE_DIR WORK_DIR
set -euo pipefail
exporter=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
sed -e 's/arch: bert/arch: gpt/' -e 's/layernorm_eps: 1.0e-12/layernorm_eps: 1.0e-5/' \
    "$src/configs/ci-transformer.yaml" > "$work/ci-transformer-gpt.yaml"
grep -q 'arch: gpt' "$work/ci-transformer-gpt.yaml"
for cfg in "$src/configs/ci-transformer.yaml" "$work/ci-transformer-gpt.yaml"; do
    dir="$work/$(basename "$cfg" .yaml)"
    # At init and perturbed (every parameter matters, LayerNorm gains and biases included).
    "$exporter" --config "$cfg" --backend cpu --batch 4 --dir "$dir"
    python3 "$src/tests/reference/python_transformer_reference.py" "$dir"
    "$exporter" --config "$cfg" --backend cpu --batch 4 --perturb 0.5 --dir "$dir-perturbed"
    python3 "$src/tests/reference/python_transformer_reference.py" "$dir-perturbed"
done
