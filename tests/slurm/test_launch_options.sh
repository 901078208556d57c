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

if ((failures)); then echo "launch options test: $failures failure(s)"; exit 1; fi
echo "launch options test: PASS"
