#!/usr/bin/env bash
# README command 2: install what is missing, build, and run the whole test suite; then
# the CPU path again under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
launch/install_deps.sh
launch/build.sh
ctest --test-dir build --output-on-failure -j2 "$@"
# The sanitizer pass: CPU-only (no CUDA compile), every unit, MPI and e2e test; the
# Slurm, plot, plan and fuzz tests are left to the normal build (they test scripts, or are
# already sanitized). Leak detection is off: Open MPI keeps its internal allocations
# until exit (and some past MPI_Finalize), which LeakSanitizer reports as leaks that
# are not ours; ASan's memory errors and UBSan's checks stay on and fail the run.
# allocator_may_return_null: a buffer too large to allocate must stay a bad_alloc (a
# UserError, tested), not ASan's own abort.
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSCALEBENCH_CUDA=OFF -DSCALEBENCH_SANITIZE=ON
cmake --build build-asan -j"$(nproc)"
ctest --test-dir build-asan --output-on-failure -j2 -E '^(slurm_batch_scripts|plot_scaling|multi_gpu_plan_cpu|fuzz_config)$' "$@"
