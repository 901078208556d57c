#!/usr/bin/env bash
# CTest entry fuzz_config: builds tests/fuzz/fuzz_config.cpp with clang and
# -fsanitize=fuzzer,address,undefined, seeds the corpus with configs/*.yaml and fuzzes
# parse_config for a bounded time. Exit 77 (CTest SKIP) when clang++ or libFuzzer is missing.
# Usage: run_fuzz_config.sh SOURCE_DIR WORK_DIR [SECONDS]
set -euo pipefail
src=$1 work=$2 seconds=${3:-60}
cxx=$(command -v clang++ || true)
if [[ -z $cxx ]]; then echo "clang++ not found: skipping (launch/install_deps.sh installs clang)"; exit 77; fi
mkdir -p "$work/corpus" "$work/artifacts"
probe="$work/probe.cpp"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe"
if ! "$cxx" -fsanitize=fuzzer "$probe" -o "$work/probe" 2>/dev/null; then
  echo "clang++ has no libFuzzer runtime (libclang-rt-dev): skipping"; exit 77
fi
flags=(-std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
"$cxx" "${flags[@]}" -I"$src" "$src/tests/fuzz/fuzz_config.cpp" "$src/src/core/config.cpp" \
  "$src/models/ops.cpp" "$src/models/mlp.cpp" "$src/models/transformer.cpp" "$src/models/rng.cpp" \
  $(pkg-config --cflags --libs yaml-cpp fmt 2>/dev/null || echo -lyaml-cpp -lfmt) -o "$work/fuzz_config"
cp "$src"/configs/*.yaml "$src"/tests/fuzz/findings/* "$work/corpus/"  # findings stay regression inputs
# yaml-cpp allocates per nesting level; cap the input and memory so a deep document is not an OOM "crash".
exec "$work/fuzz_config" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus"
