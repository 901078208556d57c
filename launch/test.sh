#!/usr/bin/env bash
# README command 2: install what is missing, build, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/install_deps.sh
launch/build.sh
ctest --test-dir build --output-on-failure -j2 "$@"
