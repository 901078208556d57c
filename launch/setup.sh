#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the built-in default
# workload on 2 ranks (CPU ranks without a GPU, one rank per GPU with one).
set -euo pipefail
cd "$(dirname "$0")/.."
launch/install_deps.sh
launch/build.sh
root_flags=()
[[ $EUID -eq 0 ]] && root_flags=(--allow-run-as-root)
mpirun "${root_flags[@]}" --oversubscribe -np 2 build/scalebench
