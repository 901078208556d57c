#!/usr/bin/env bash
# CUDA compiler launcher for the kernels' sources (CMakeLists.txt): runs the compile given as its
# arguments, which carries --resource-usage, and keeps ptxas's per-kernel report for every
# architecture in OBJECT.resources, where tests/static/kernel_resources.sh reads it: the static
# check then costs no second compile. Every other line of the compiler's output passes through.
set -uo pipefail
object=""
args=("$@")
for ((i = 0; i < ${#args[@]} - 1; i++)); do
  [[ ${args[i]} == -o ]] && object=${args[i + 1]}
done
log=$(mktemp)
"$@" 2>"$log"
rc=$?
if [[ -n $object && $rc -eq 0 ]]; then cp "$log" "$object.resources"; fi
grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' "$log" >&2
rm -f "$log"
exit $rc
