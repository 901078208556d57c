#!/usr/bin/env bash
# README command 2: install what is missing, build, and run the whole test suite; then
# the CUDA backend without cuDNN is built, and the CPU path runs again under
# AddressSanitizer + UndefinedBehaviorSanitizer (build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
launch/install_deps.sh
launch/build.sh
ctest --test-dir build --output-on-failure -j2 "$@"
# Where build/ has CUDA with cuDNN, the CUDA backend without it (im2col convolutions,
# -DSCALEBENCH_CUDNN=OFF) must compile and link too: one GPU architecture, the binary only.
if grep -q '^CUDNN_LIBRARY:FILEPATH=/' build/CMakeCache.txt; then
  cmake -S . -B build-nocudnn -DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DSCALEBENCH_CUDNN=OFF \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_TESTING=OFF
  cmake --build build-nocudnn -j"$(nproc)" --target scalebench
fi
# The sanitizer pass: CPU-only (no CUDA compile), every unit, MPI and e2e test; the
# Slurm, plot, plan, fuzz and kernel-resource tests are left to the normal build (they test scripts or compiled GPU code, or are
# already sanitized). Leak detection is off: Open MPI keeps its internal allocations
# until exit (and some past MPI_Finalize), which LeakSanitizer reports as leaks that
# are not ours; ASan's memory errors and UBSan's checks stay on and fail the run.
# allocator_may_return_null: a buffer too large to allocate must stay a bad_alloc (a
# UserError, tested), not ASan's own abort.
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSCALEBENCH_CUDA=OFF -DSCALEBENCH_SANITIZE=ON
cmake --build build-asan -j"$(nproc)"
ctest --test-dir build-asan --output-on-failure -j2 -E '^(slurm_batch_scripts|plot_scaling|multi_gpu_plan_cpu|fuzz_inputs|kernel_resources_report|kernel_resources_check)$' "$@"
