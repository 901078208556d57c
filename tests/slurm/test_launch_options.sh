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
expect_refusal "--sizes: 02 is given twice (entries 2 and 3, as 2)" launch/sweep.sh --bin /bin/true --dry-run --np 4 --sizes 1,2,02
expect_refusal "--sizes '1,8': 8 is more than the 4 ranks launched" launch/sweep.sh --bin /bin/true --dry-run --np 04 --sizes 1,8
expect_refusal "--mpirun-args 'x\\': a trailing backslash" launch/sweep.sh --bin /bin/true --dry-run --np 2 --mpirun-args 'x\'
expect_refusal "-n '1e9'" launch/soak.sh --dry-run -n 1e9
expect_refusal "--nodes entry '99999999999999999999'" launch/slurm/node_sweep.sh --nodes 99999999999999999999 --gpus-per-node 1
(cd "$tmp" && SLURM_JOB_ID=1 SLURM_NTASKS=abc SCALEBENCH_BIN=/bin/true timeout 30 bash "$src/launch/slurm/run_in_job.sh") \
  >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
((rc == 2)) && grep -q "SLURM_NTASKS 'abc'" "$tmp/err" || fail "run_in_job.sh with SLURM_NTASKS=abc: exit $rc: $(cat "$tmp/err")"
[[ ! -e $tmp/runs ]] || fail "run_in_job.sh with SLURM_NTASKS=abc made runs/"
# run_in_job.sh and node_sweep.sh against a fake srun and sbatch on PATH that write down their
# arguments, one a line: everything is checked before a folder is made or a line is printed, the
# variable actually read is named, pass-through flags are split as a shell splits them.
mkdir -p "$tmp/fake"
printf '#!/bin/sh\n[ "$1" = --mpi=list ] && exit 0\nprintf "%%s\\n" "$@" >"%s/srun.args"\n' "$tmp" >"$tmp/fake/srun"
printf '#!/bin/sh\nprintf "%%s\\n" "$@" >>"%s/sbatch.args"\necho 4242\n' "$tmp" >"$tmp/fake/sbatch"
chmod +x "$tmp/fake/srun" "$tmp/fake/sbatch"
run_job() {  # run_job VAR=VALUE...: run_in_job.sh in a fake allocation of 2 tasks, no binding
  (cd "$tmp" && env -u SLURM_NPROCS -u SLURM_CPUS_PER_TASK -u SCALEBENCH_SCALING -u SCALEBENCH_LAUNCHER \
    SLURM_JOB_ID=1 SLURM_NTASKS=2 SCALEBENCH_BIN=/bin/true SCALEBENCH_BIND=0 SCALEBENCH_OUT="$tmp/job/x.jsonl" \
    PATH="$tmp/fake:$PATH" "$@" timeout 30 bash "$src/launch/slurm/run_in_job.sh") >"$tmp/out" 2>"$tmp/err" </dev/null
}
job_refuses() {  # job_refuses WANT VAR=VALUE...: exit 2, WANT the one line, no folder made, no srun
  local want=$1; shift
  run_job "$@"; local rc=$?
  ((rc == 2)) && [[ $(wc -l <"$tmp/err") -eq 1 && $(cat "$tmp/err") == *"$want"* ]] ||
    fail "run_in_job.sh $*: exit $rc, not one line with '$want': $(cat "$tmp/err")"
  [[ ! -e $tmp/job && ! -e $tmp/srun.args ]] || fail "run_in_job.sh $*: made its folder or ran srun before refusing"
  rm -rf "$tmp/job" "$tmp/srun.args"
}
job_refuses "SCALEBENCH_SRUN_ARGS '-x \"A': unbalanced quotes" SCALEBENCH_SRUN_ARGS='-x "A'
job_refuses "SCALEBENCH_MPIRUN_ARGS 'a\\': a trailing backslash" SCALEBENCH_LAUNCHER=mpirun SCALEBENCH_MPIRUN_ARGS='a\'
job_refuses "SLURM_NPROCS 'abc': not a whole number" SLURM_NTASKS= SLURM_NPROCS=abc
job_refuses "SCALEBENCH_SCALING: 2 is given twice (entries 1 and 2)" SCALEBENCH_SCALING=2,2
job_refuses "SCALEBENCH_SCALING entry '0'" SCALEBENCH_SCALING=1,0
job_refuses "SCALEBENCH_LAUNCHER='pdsh'" SCALEBENCH_LAUNCHER=pdsh
job_refuses "SCALEBENCH_BIND 'yes'" SCALEBENCH_BIND=yes
run_job SCALEBENCH_SRUN_ARGS="--comment \"c\\\"d\" --x 'y z' a\\ b ''" ||
  fail "run_in_job.sh with quoted SCALEBENCH_SRUN_ARGS: exit $?: $(cat "$tmp/err")"
# The words srun got: c"d, y z and "a b" whole, the empty word kept, then the training command.
[[ $(sed -n '/^--comment$/,/^\/bin\/true$/p' "$tmp/srun.args" | tr '\n' '|') == '--comment|c"d|--x|y z|a b||/bin/true|' ]] ||
  fail "SCALEBENCH_SRUN_ARGS not split as a shell splits it: $(tr '\n' '|' <"$tmp/srun.args")"
rm -rf "$tmp/job" "$tmp/srun.args"
sweep_refuses() {  # sweep_refuses WANT ARGS...: node_sweep.sh exits 2 with WANT, never calls sbatch
  local want=$1; shift
  (cd "$tmp" && PATH="$tmp/fake:$PATH" timeout 30 bash "$src/launch/slurm/node_sweep.sh" --dir "$tmp/ns" "$@") \
    >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$?
  ((rc == 2)) && [[ $(wc -l <"$tmp/err") -eq 1 && $(cat "$tmp/err") == *"$want"* ]] ||
    fail "node_sweep.sh $*: exit $rc, not one line with '$want': $(cat "$tmp/err")"
  [[ ! -e $tmp/sbatch.args && ! -e $tmp/ns ]] || fail "node_sweep.sh $*: called sbatch or made its folder before refusing"
  rm -rf "$tmp/sbatch.args" "$tmp/ns"
}
sweep_refuses "--nodes: 1 is given twice (entries 1 and 2)" --nodes 1,1 --gpus-per-node 1
sweep_refuses "--nodes: 01 is given twice (entries 2 and 3, as 1)" --nodes 2,1,01 --gpus-per-node 1
sweep_refuses "--gpus-per-node '99999999999999999999': not a whole number from 0 to 1048576" \
  --nodes 1 --gpus-per-node 99999999999999999999 --tasks-per-node 2
sweep_refuses "--gpus-per-node '08x'" --nodes 1 --gpus-per-node 08x --tasks-per-node 2
sweep_refuses "--gpus-per-node 0 (CPU ranks) needs --tasks-per-node" --nodes 1 --gpus-per-node 0
sweep_refuses "--sbatch-args '-p \"gpu': unbalanced quotes" --nodes 1 --sbatch-args '-p "gpu'
(cd "$tmp" && PATH="$tmp/fake:$PATH" timeout 30 bash "$src/launch/slurm/node_sweep.sh" --dir "$tmp/ns" --nodes 1,02 \
  --gpus-per-node 0 --tasks-per-node 2 --sbatch-args '--comment "c\"d"') >"$tmp/out" 2>"$tmp/err" </dev/null ||
  fail "node_sweep.sh --nodes 1,02 with a fake sbatch: exit $?: $(cat "$tmp/err")"
[[ $(grep -c '^--parsable$' "$tmp/sbatch.args") == 2 && $(grep -c '^c"d$' "$tmp/sbatch.args") == 2 ]] &&
  grep -qx -- '--nodes=2' "$tmp/sbatch.args" && [[ $(cat "$tmp/out") == $'4242\n4242' ]] ||
  fail "node_sweep.sh: not two jobs (1 and 2 nodes) with --sbatch-args split as a shell splits: $(tr '\n' '|' <"$tmp/sbatch.args")"
rm -rf "$tmp/sbatch.args" "$tmp/ns" "$tmp/out" "$tmp/err"

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
