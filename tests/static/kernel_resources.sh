#!/usr/bin/env bash
# The resource report of every CUDA kernel for each claimed architecture (sm_80, sm_86, sm_89,
# sm_90), demangled, for tests/static/test_kernel_resources.cpp to hold against each
# architecture's limits.
#   kernel_resources.sh NVCC SOURCE_DIR OUT [BUILT_BINARY]
# Where cuobjdump exists and BUILT_BINARY holds an architecture's code, that code's resource
# usage is read from the binary (cuobjdump --dump-resource-usage); every other architecture is
# compiled device-only from models/cuda/*.cu with nvcc --resource-usage (ptxas's report).
set -euo pipefail
nvcc=$1 src=$2 out=$3 binary=${4:-}
archs=(80 86 89 90)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/report"

cuobjdump=$(dirname "$nvcc")/cuobjdump
[[ -x $cuobjdump ]] || cuobjdump=$(command -v cuobjdump || true)
if [[ -n $cuobjdump && -n $binary && -f $binary ]]; then
  "$cuobjdump" --dump-resource-usage "$binary" > "$tmp/cuobjdump" 2>/dev/null || : > "$tmp/cuobjdump"
fi

includes=(-I"$src")
for dir in /usr/include/nlohmann /usr/local/include/nlohmann; do
  [[ -d $dir ]] && includes+=(-I"$(dirname "$dir")")
done
for arch in "${archs[@]}"; do
  if [[ -s $tmp/cuobjdump ]] && grep -q "^arch = sm_${arch}\$" "$tmp/cuobjdump"; then
    echo "sm_${arch}: from $binary (cuobjdump)" >&2
    continue
  fi
  echo "sm_${arch}: compiling models/cuda/*.cu (nvcc --resource-usage)" >&2
  for cu in "$src"/models/cuda/*.cu; do
    grep -q "__global__" "$cu" || continue
    "$nvcc" -std=c++17 "${includes[@]}" -DSCALEBENCH_HAVE_CUDA=1 --expt-relaxed-constexpr \
      -gencode "arch=compute_${arch},code=sm_${arch}" --fatbin --resource-usage -o "$tmp/out.fatbin" "$cu" \
      >> "$tmp/report" 2>&1 || { echo "nvcc failed on $cu for sm_${arch}:" >&2; tail -20 "$tmp/report" >&2; exit 1; }
  done
done
[[ -s $tmp/cuobjdump ]] && cat "$tmp/cuobjdump" >> "$tmp/report"
c++filt < "$tmp/report" > "$out"
echo "wrote $out: $(grep -c -e 'Compiling entry function' -e '^ *Function ' "$out") kernel entries" >&2
