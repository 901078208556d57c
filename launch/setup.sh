#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the built-in default
# workload on 2 ranks (CPU ranks without a GPU, one rank per GPU with one). The records
# go to runs/train.jsonl, which git ignores: the checkout stays as it was.
#   --run-only   the run alone, on the binary already in build/ (the clean-checkout test)
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/stage.sh
case "${1:-}" in
  "") stage "install and build" bash -c 'launch/install_deps.sh && launch/build.sh' ;;
  --run-only) ;;
  *) echo "launch/setup.sh: unknown argument '$1' (give none, or --run-only)" >&2
     exit 2 ;;
esac
root_flags=()
[[ $EUID -eq 0 ]] && root_flags=(--allow-run-as-root)
stage "default run" mpirun "${root_flags[@]}" --oversubscribe -np 2 build/scalebench
