#!/usr/bin/env bash
# The resource report of every CUDA kernel for each claimed architecture (sm_80, sm_86, sm_89,
# sm_90), demangled, for tests/static/test_kernel_resources.cpp to hold against each
# architecture's limits.
#   kernel_resources.sh NVCC SOURCE_DIR OUT [OBJECTS]
# OBJECTS: the build's objects (a ;-separated list); the build compiles the kernels with
# --resource-usage and keeps ptxas's report beside each object (OBJECT.resources,
# cmake/keep_resource_usage.sh). An architecture found there is read from them; every other is
# compiled device-only from models/cuda/*.cu with nvcc --resource-usage (ptxas's same report).
set -euo pipefail
nvcc=$1 src=$2 out=$3 objects=${4:-}
archs=(80 86 89 90)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/report"

IFS=';' read -r -a object_list <<< "$objects"
for object in "${object_list[@]}"; do
  [[ -f $object.resources ]] && cat "$object.resources" >> "$tmp/built"
done

compile() {  # arch file: ptxas's report of one file's kernels for one architecture
  "$nvcc" -std=c++17 -I"$src" -DSCALEBENCH_HAVE_CUDA=1 --expt-relaxed-constexpr \
    -gencode "arch=compute_$1,code=sm_$1" --fatbin --resource-usage -o "$tmp/$1_$(basename "$2").fatbin" "$2" \
    > "$tmp/$1_$(basename "$2").txt" 2>&1 || { echo "nvcc failed on $2 for sm_$1:" >&2; tail -20 "$tmp/$1_$(basename "$2").txt" >&2; return 1; }
}
work=()
for arch in "${archs[@]}"; do
  if [[ -s $tmp/built ]] && grep -q "for 'sm_${arch}'\$" "$tmp/built"; then
    echo "sm_${arch}: from the build's objects (ptxas's report kept at compile time)" >&2
    continue
  fi
  echo "sm_${arch}: compiling models/cuda/*.cu (nvcc --resource-usage)" >&2
  for cu in "$src"/models/cuda/*.cu; do
    grep -q "__global__" "$cu" && work+=("$arch $cu")
  done
done
# Two compilations at a time (CI has two cores); any failure fails the report.
failed=0
for job in "${work[@]}"; do
  while (( $(jobs -rp | wc -l) >= ${KERNEL_REPORT_JOBS:-2} )); do wait -n || failed=1; done
  compile $job &
done
while (( $(jobs -rp | wc -l) > 0 )); do wait -n || failed=1; done
(( failed == 0 )) || exit 1
for job in "${work[@]}"; do
  set -- $job
  cat "$tmp/$1_$(basename "$2").txt" >> "$tmp/report"
done
[[ -s $tmp/built ]] && cat "$tmp/built" >> "$tmp/report"
c++filt < "$tmp/report" > "$out"
echo "wrote $out: $(grep -c -e 'Compiling entry function' -e '^ *Function ' "$out") kernel entries" >&2
