#!/usr/bin/env bash
# The launch scripts that take options (launch/sweep.sh, launch/soak.sh,
# launch/slurm/node_sweep.sh) answer an option given without its value with one usage line
# naming the option and exit 2, before they do anything, never with bash's "unbound variable".
# Needs neither Slurm nor a GPU: each script stops while reading its options.
#   tests/slurm/test_launch_options.sh SOURCE_DIR
# Exit 0 pass, 1 fail.
set -uo pipefail

src=$(realpath "${1:?usage: test_launch_options.sh SOURCE_DIR}")
tmp=$(mktemp -d /tmp/scalebench-launch-options.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "launch options test: FAIL: $*"; failures=$((failures + 1)); }

# expect_usage SCRIPT OPTION [EARLIER ARGS...]: SCRIPT ARGS... OPTION, with nothing after OPTION.
expect_usage() {
  local script=$1 option=$2; shift 2
  local name
  name=$(basename "$script")
  (cd "$tmp" && timeout 30 bash "$src/$script" "$@" "$option") >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$?
  local want="$name: $option needs a value (usage: $name --help)"
  ((rc == 2)) || fail "$script $* $option: exit $rc, expected 2: $(cat "$tmp/err")"
  [[ $(cat "$tmp/err") == "$want" ]] || fail "$script $* $option: stderr is not the one line '$want': $(cat "$tmp/err")"
  [[ ! -s $tmp/out ]] || fail "$script $* $option: printed on stdout: $(cat "$tmp/out")"
}

for option in -n --np --sizes -c --config --backend -o --out --bin --mpirun-args; do
  expect_usage launch/sweep.sh "$option"
done
expect_usage launch/sweep.sh --out --per-size --dry-run  # after other options too
for option in -n --np --duration --interval -o --out --bin; do
  expect_usage launch/soak.sh "$option"
done
for option in --nodes --gpus-per-node --tasks-per-node --dir --job-name --time --launcher --sbatch-args; do
  expect_usage launch/slurm/node_sweep.sh "$option"
done
expect_usage launch/slurm/node_sweep.sh --time --nodes 1,2 --parallel
# Nothing was made by a refused call (node_sweep.sh makes its runs/ folder only once it runs).
[[ -z $(ls -A "$tmp" | grep -v '^out$\|^err$') ]] || fail "a refused call left files: $(ls -A "$tmp")"

# Hostile values (launch/options.sh): one line naming the option or variable, exit 2, nothing
# made; counts bounded (never an endless loop), pass-through flags split as a shell splits them,
# relative outputs resolved from where the script was started.
expect_refusal() {  # WANT SCRIPT ARGS...: exit 2 with WANT in the one line of stderr
  local want=$1 script=$2; shift 2
  (cd "$tmp" && timeout 30 bash "$src/$script" "$@") >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$?
  ((rc == 2)) || fail "$script $*: exit $rc, expected 2: $(cat "$tmp/err")"
  [[ $(wc -l <"$tmp/err") -eq 1 && $(cat "$tmp/err") == *"$want"* ]] || fail "$script $*: not one line with '$want': $(cat "$tmp/err")"
}
expect_refusal "--np '99999999999999999999': not a whole number from 1 to 1048576" launch/sweep.sh --bin /bin/true --dry-run --np 99999999999999999999
expect_refusal "--sizes entry '0'" launch/sweep.sh --bin /bin/true --dry-run --np 4 --sizes 1,0
expect_refusal "--mpirun-args '-x \"A': unbalanced quotes" launch/sweep.sh --bin /bin/true --dry-run --np 2 --mpirun-args '-x "A'
expect_refusal "-n '1e9'" launch/soak.sh --dry-run -n 1e9
expect_refusal "--nodes entry '99999999999999999999'" launch/slurm/node_sweep.sh --nodes 99999999999999999999 --gpus-per-node 1
(cd "$tmp" && SLURM_JOB_ID=1 SLURM_NTASKS=abc SCALEBENCH_BIN=/bin/true timeout 30 bash "$src/launch/slurm/run_in_job.sh") \
  >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
((rc == 2)) && grep -q "SLURM_NTASKS 'abc'" "$tmp/err" || fail "run_in_job.sh with SLURM_NTASKS=abc: exit $rc: $(cat "$tmp/err")"
if command -v mpirun >/dev/null 2>&1; then
  (cd "$tmp" && timeout 30 bash "$src/launch/sweep.sh" --bin /bin/true --dry-run --np 2 -o sub/x.jsonl \
    --mpirun-args "--mca btl '^openib' -x 'A B'") >"$tmp/out" 2>"$tmp/err" </dev/null ||
    fail "sweep.sh --dry-run: exit $?: $(cat "$tmp/err")"
  [[ ! -e $tmp/sub ]] || fail "sweep.sh --dry-run made the folder of its output"
  grep -qF -- "--mca btl \^openib -x A\ B " "$tmp/out" || fail "--mpirun-args not split as a shell splits: $(cat "$tmp/out")"
  rm -f "$tmp/out" "$tmp/err"
fi
(cd "$tmp" && timeout 30 bash "$src/launch/soak.sh" --dry-run -n 2 -o rel.jsonl) >"$tmp/soak" 2>&1 </dev/null ||
  fail "soak.sh --dry-run: exit $?"
grep -qF -- "--out $tmp/rel.jsonl" "$tmp/soak" || fail "soak.sh -o rel.jsonl not resolved from where it started: $(cat "$tmp/soak")"
rm -f "$tmp/soak" "$tmp/out" "$tmp/err"

if ((failures)); then echo "launch options test: $failures failure(s)"; exit 1; fi
echo "launch options test: PASS"
