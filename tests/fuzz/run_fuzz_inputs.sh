#!/usr/bin/env bash
# CTest entry fuzz_inputs: builds tests/fuzz/fuzz_inputs.cpp with clang and
# -fsanitize=fuzzer,address,undefined, seeds the corpus with the shipped configs, hardware
# profiles, some record files, the doctor's snapshot fixtures and the shipped host sections (each
# behind the byte that selects its reader) and fuzzes the readers for a bounded time, shared
# between them. Exit 77 (CTest SKIP) when clang++ or libFuzzer is missing.
# Usage: run_fuzz_inputs.sh SOURCE_DIR WORK_DIR [SECONDS]
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
# -O0 with line tables: half the compile time of -O1 under the sanitizers; most of each run is in
# yaml-cpp and the standard library, which are built optimized.
flags=(-std=c++17 -g1 -O0 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
sources=(tests/fuzz/fuzz_inputs.cpp src/core/{choices,config_checks,config_json,config_yaml,yaml_reader,files,data_dir}.cpp
         base/numbers.cpp src/projection/profile_ranges.cpp src/projection/calibration_checks.cpp src/doctor/snapshot.cpp
         src/core/plausible.cpp src/core/results.cpp src/projection/hardware.cpp src/system/gpu_peaks.cpp models/ops.cpp
         models/mlp.cpp models/transformer.cpp models/rng.cpp)
# Each source compiled on its own, two at a time (CI has two cores), then linked.
objects=() failed=0
for f in "${sources[@]}"; do
  while (( $(jobs -rp | wc -l) >= 2 )); do wait -n || failed=1; done
  obj=$work/$(basename "$f" .cpp).o
  objects+=("$obj")
  "$cxx" "${flags[@]}" -I"$src" -DSCALEBENCH_SOURCE_DIR="\"$src\"" $(pkg-config --cflags yaml-cpp fmt 2>/dev/null) \
    -c "$src/$f" -o "$obj" &
done
while (( $(jobs -rp | wc -l) > 0 )); do wait -n || failed=1; done
(( failed == 0 )) || { echo "fuzz_inputs: a source failed to compile" >&2; exit 1; }
"$cxx" "${flags[@]}" "${objects[@]}" $(pkg-config --libs yaml-cpp fmt 2>/dev/null || echo -lyaml-cpp -lfmt) \
  -o "$work/fuzz_inputs"
# Seeds behind their selector byte: 0 config, 1 hardware profile, 2 record file (at most 4 KiB
# of each record file), 3 doctor snapshot, 4 host section. Findings are configs and stay
# regression inputs.
seed() {  # SELECTOR FILE
  { printf "\\x0$1"; head -c 4096 "$2"; } >"$work/corpus/$1-$(basename "$2")"
}
for f in "$src"/configs/*.yaml "$src"/tests/fuzz/findings/*; do seed 0 "$f"; done
for f in "$src"/configs/hardware/*.yaml; do seed 1 "$f"; done
for f in $(find "$src/results" -name '*.jsonl' | sort | head -20); do seed 2 "$f"; done
for f in "$src"/tests/fixtures/doctor/*.json; do seed 3 "$f"; done
for f in "$src"/configs/hosts/*.yaml; do seed 4 "$f"; done
# yaml-cpp allocates per nesting level; cap the input and memory so a deep document is not an OOM "crash".
exec "$work/fuzz_inputs" -max_total_time="$seconds" -max_len=8192 -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus"
