#!/usr/bin/env bash
# The installed binary from any folder: `cmake --install BUILD --prefix TMP/prefix`, then every
# subcommand run from an empty folder (no configs/, no results/) as the README writes it
# (configs/NAME.yaml, profile names, the plot script), with PREFIX/bin/scalebench. A profile put only
# into the prefix proves the data is read from PREFIX/share/scalebench, not from the source tree.
#   test_install.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
share=$tmp/prefix/share/scalebench
sb=$tmp/prefix/bin/scalebench
for f in "$sb" "$share/configs/ci-small.yaml" "$share/configs/hardware/a100-sxm4-40gb.yaml" \
         "$share/configs/scenarios" "$share/results/plot_scaling.py" "$share/results/compare_report.py" \
         "$share/results/tool_input.py" "$share/results/record_ranges.json" \
         "$share/results/published/nccl_allreduce.yaml"; do
  [[ -e $f ]] || { echo "FAIL: cmake --install left out ${f#"$tmp"/}"; exit 1; }
done
sed 's/^name: .*/name: "install probe"/' "$share/configs/hardware/a100-sxm4-40gb.yaml" > "$share/configs/hardware/install-probe.yaml"

mkdir "$tmp/elsewhere" && cd "$tmp/elsewhere"
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
failed=0
# run NAME EXPECTED_EXIT COMMAND...: the command's exit code must be EXPECTED_EXIT.
run() {
  local name=$1 want=$2 got=0 start=$SECONDS
  shift 2
  "$@" > "$tmp/$name.log" 2>&1 || got=$?
  if [[ $got != "$want" ]]; then
    echo "FAIL $name: exit $got (expected $want): $*"; tail -5 "$tmp/$name.log"; failed=1
  else
    echo "ok   $name ($((SECONDS - start)) s)"
  fi
}
run train 0 "${mpirun[@]}" -np 2 "$sb" train --config configs/ci-small.yaml --scaling 1,2 --steps 5 --out train.jsonl
run report 0 "$sb" report train.jsonl
run comm 0 "${mpirun[@]}" -np 2 "$sb" comm --backend mpi -b 8 -e 64K -f 8 --out comm.jsonl
run stress 0 "${mpirun[@]}" -np 2 "$sb" stress --duration 2s --interval 1s --config configs/ci-small.yaml --out stress.jsonl
run project 0 "$sb" project --hardware a100-sxm4-40gb --config configs/bert-base.yaml
run project-prefix-profile 0 "$sb" project --hardware install-probe --config configs/ci-small.yaml
run compare 0 "$sb" compare --hardware a100-sxm4-40gb,rtx4090-48gb-pcie4 --config configs/bert-base.yaml
# One scenario preset: its workloads, and the card tests' measured rows (m) from the prefix's records.
run compare-scenario 0 "$sb" compare --hardware h200-sxm,a100-sxm4-40gb --scenario small-experiments
run doctor 0 "${mpirun[@]}" -np 2 "$sb" doctor --train-steps 2 --report doctor.md
# gemm measures a GPU: without one it says so (exit 2), with one it runs; either way no data is missing.
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then gemm_exit=0; else gemm_exit=2; fi
run gemm "$gemm_exit" "$sb" gemm
if /usr/bin/python3 -c 'import matplotlib' 2> /dev/null; then
  run plot 0 /usr/bin/python3 "$share/results/plot_scaling.py" train.jsonl -o plots
  run compare-report 0 "$sb" compare --hardware a100-sxm4-40gb,rtx4090-48gb-pcie4 --scenario small-experiments \
    --report guide.md
fi
grep -q 'install-probe\|install probe' "$tmp/project-prefix-profile.log" ||
  { echo "FAIL: the prefix's own profile was not the one read"; failed=1; }
grep -q '^  (m) ' "$tmp/compare-scenario.log" && grep -q "$share/results/" "$tmp/compare-scenario.log" ||
  { echo "FAIL: compare's card tests did not read the records under $share/results"; failed=1; }
exit $failed
