#!/usr/bin/env bash
# README command 2: install what is missing, build, and run the whole test suite; then the CUDA
# backend without cuDNN is built, and the unit, MPI and end-to-end suites run again under
# AddressSanitizer + UndefinedBehaviorSanitizer (build-asan). Each stage prints its wall and CPU time.
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/stage.sh
stage "install and build" bash -c 'launch/install_deps.sh && launch/build.sh'
stage "test suite" ctest --test-dir build --output-on-failure -j2 "$@"
# Where build/ has CUDA with cuDNN, the CUDA backend without it (im2col convolutions) must compile
# and link too: the sources that read SCALEBENCH_HAVE_CUDNN compiled again without it, linked with
# build/'s other objects (CMakeLists.txt: scalebench_nocudnn).
if grep -q '^CUDNN_LIBRARY:FILEPATH=/' build/CMakeCache.txt; then
  stage "CUDA without cuDNN" cmake --build build -j"$(nproc)" --target scalebench_nocudnn
fi
# The sanitizer pass: CPU-only (no CUDA compile), the binary and the unit, MPI and e2e test binaries
# only (the tests labelled unit, mpi, e2e: those that run our code; the scripts, plots, documents,
# fuzzing and kernel resources are the normal build's), at -O1 with line tables (-g1): errors are
# found as at -O2, for less compile time. Leak detection is off: Open MPI keeps its internal
# allocations until exit (and some past MPI_Finalize), which LeakSanitizer reports as leaks that are
# not ours; ASan's memory errors and UBSan's checks stay on and fail the run.
# allocator_may_return_null: a buffer too large to allocate must stay a bad_alloc (a UserError,
# tested), not ASan's own abort.
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
stage "sanitizer build" bash -c 'cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1 -DNDEBUG" \
    -DSCALEBENCH_CUDA=OFF -DSCALEBENCH_SANITIZE=ON &&
  cmake --build build-asan -j"$(nproc)" --target scalebench scalebench_unit_tests scalebench_mpi_tests scalebench_e2e_tests'
stage "sanitizer suite" ctest --test-dir build-asan --output-on-failure -j2 -L '^(unit|mpi|e2e)$' "$@"
