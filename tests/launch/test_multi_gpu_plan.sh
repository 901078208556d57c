#!/usr/bin/env bash
# The multi-GPU plan (launch/multi_gpu_plan.sh) end to end on CPU ranks: --cpu with the real
# binary (mpirun -np 2, CI configs, one variant), then its outputs checked: a zero exit, the six
# tables and the archive, train records at 1 and 2 ranks with identical replicas, both peer faults
# passing, comm and projection rows, at most 8 files copied by --return; a repeated part runs
# nothing again; a failing step makes the exit 1 and is listed; --share-gpu's commands (dry
# run); each rank's GoogleTest XML read into the summary; bad arguments are exit 2.
# DDP runs only where python3 imports torch (not in CI).
#   tests/launch/test_multi_gpu_plan.sh SCALEBENCH_BINARY SOURCE_DIR
set -uo pipefail

bin=$(realpath "${1:?usage: test_multi_gpu_plan.sh SCALEBENCH_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_multi_gpu_plan.sh SCALEBENCH_BINARY SOURCE_DIR}")
plan=$src/launch/multi_gpu_plan.sh
tmp=$(mktemp -d /tmp/scalebench-plan.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
log() { echo "plan test: $*"; }
fail() { log "FAIL: $*"; failures=$((failures + 1)); }
expect_in() {  # FILE PATTERN WHAT
  grep -Eq -- "$2" "$1" || fail "$3: /$2/ not in $1"
}

export SCALEBENCH_BIN=$bin PLAN_VARIANTS="off:1"
mkdir "$tmp/return"
"$plan" --cpu --return "$tmp/return" "$tmp/out" all >"$tmp/all.log" 2>&1
rc=$?
((rc == 0)) || { fail "the plan exited $rc"; tail -40 "$tmp/all.log"; }
out=$tmp/out
for f in summary.md scaling.md ddp.md comm.md faults.md projection.md details-all.tar.gz; do
  [[ -s $out/$f ]] || fail "$f missing or empty"
done
expect_in "$out/scaling.md" '^\| mlp-ci \| 1 \| 32 \| [0-9.]+ .*\| 100\.0% \| yes \|$' "mlp-ci at 1 rank"
expect_in "$out/scaling.md" '^\| mlp-ci \| 2 \| 32 \| [0-9.]+ .*\| [0-9.]+% \| yes \|$' "mlp-ci at 2 ranks"
expect_in "$out/scaling.md" '^\| resnet-ci \| off \| [0-9.]+% \(' "the graphs-off bucket-1 variant"
expect_in "$out/faults.md" '^\| SIGKILL \| 1 \(.*\| PASS \|' "the SIGKILL fault"
expect_in "$out/faults.md" '^\| SIGSTOP \| 1 \(.*\| PASS \|' "the SIGSTOP fault"
expect_in "$out/comm.md" '^\| all_reduce \| algbw [0-9]+ \| [0-9.]+ \(fit' "the all_reduce row"
expect_in "$out/projection.md" '^\| transformer-ci \| 2 \| [0-9.]+ \| [0-9.]+ \|' "a projection beside a measurement"
expect_in "$out/summary.md" 'Faults: SIGKILL rank 1 1 of 1 passed, ended within [0-9.]+ s; SIGSTOP rank 1 1 of 1 passed, ended within [0-9.]+ s' "the summary's faults"
tar -tzf "$out/details-all.tar.gz" >"$tmp/archive.txt" || fail "the archive does not list"
grep -q '^details/train/train.mlp-ci.graphs-on.bucket-25.jsonl$' "$tmp/archive.txt" \
  || fail "the archive lacks the train records"
returned=$(find "$tmp/return" -type f | wc -l)
((returned >= 7 && returned <= 8)) || fail "--return copied $returned files (7 to 8 expected)"
tail -n 1 "$tmp/all.log" | grep -q 'every record under details/' || fail "the summary is not printed last"

# A repeated part runs nothing again.
"$plan" --cpu "$out" part2 >"$tmp/again.log" 2>&1 || fail "the repeated part2 exited $?"
grep -q '== train.mlp-ci.graphs-on.bucket-25: done in an earlier call' "$tmp/again.log" \
  || fail "the repeated part2 ran its train step again"

# A failing step: exit 1, named in the summary; the other steps still run.
SCALEBENCH_BIN=/bin/false "$plan" --cpu "$tmp/broken" part2 >"$tmp/broken.log" 2>&1
rc=$?
((rc == 1)) || fail "a failing step gave exit $rc, not 1"
grep -q -- '- part2 train.resnet-ci.graphs-on.bucket-25: failed (exit 1)' "$tmp/broken/summary.md" \
  || fail "the summary does not list the failed last train step"

# --share-gpu's commands (a dry run, no GPU needed): every SharedGpu* test, the parameterized
# ones too, each rank's results in its own XML; 10 of each fault at the 8 s timeout; the DDP
# peer's --workload (torchrun takes --run for its --run-path).
NP=2 "$plan" --share-gpu 2 --dry-run "$tmp/share" all >"$tmp/share.log" 2>&1 || fail "the --share-gpu dry run exited $?"
expect_in "$tmp/share.log" '== gpu_tests .*--gtest_output=.*rank.*--gtest_filter=\\\*SharedGpu\\\*$' "the shared GPU tests"
for sig in kill stop cuda; do
  expect_in "$tmp/share.log" "== fault_$sig\.10 .*--timeout-s 8 " "the tenth $sig fault"
  grep -q "== fault_$sig\.11 " "$tmp/share.log" && fail "more than 10 $sig faults"
done
expect_in "$tmp/share.log" '== ddp .*ddp_bench\.py --workload mlp-large:1024 --workload bert-base:32 ' "the DDP peer's --workload"

# Each rank's GoogleTest XML in the summary: a failure on rank 1 is named with its message.
mkdir -p "$tmp/xml/details/gtest"
printf '<testsuites tests="2" failures="0"><testsuite name="S"><testcase name="a" classname="S"/><testcase name="b" classname="S"/></testsuite></testsuites>\n' \
  >"$tmp/xml/details/gtest/rank0.xml"
printf '<testsuites tests="2" failures="1"><testsuite name="S"><testcase name="a" classname="S"/><testcase name="b" classname="S"><failure message="x.cpp:1&#x0A;bucket 0 started late"/></testcase></testsuite></testsuites>\n' \
  >"$tmp/xml/details/gtest/rank1.xml"
python3 "$src/launch/multi_gpu_tables.py" "$tmp/xml" >/dev/null || fail "the tables of the XML folder exited $?"
expect_in "$tmp/xml/summary.md" 'rank 0: 2 passed; rank 1: 1 passed, 1 failed \(S\.b: x\.cpp:1 bucket 0 started late\)' "rank 1's failure"

# Bad input: exit 2 with a reason, before any work.
"$plan" --cpu "$tmp/bad" part9 >"$tmp/bad.log" 2>&1
rc=$?
((rc == 2)) && grep -q "'part9': expected part1, part2, part3 or all" "$tmp/bad.log" || fail "a bad part gave exit $rc"
PLAN_VARIANTS="on:7" "$plan" --cpu "$tmp/bad" part3 >"$tmp/bad.log" 2>&1
rc=$?
((rc == 2)) && grep -q "PLAN_VARIANTS: 'on:7'" "$tmp/bad.log" || fail "a bad variant gave exit $rc"
# Counts through launch/options.sh's whole_count, before a folder is made: a huge NP never
# reaches bash's arithmetic (an endless loop), a rank count is never octal.
for setting in NP=99999999999999999999 NP=abc FAULT_REPS=0 PLAN_BUDGET_S=1e3; do
  env "$setting" "$plan" --cpu "$tmp/bad-count" all >"$tmp/bad.log" 2>&1
  rc=$?
  ((rc == 2)) && grep -q "${setting%%=*} '${setting#*=}': not a whole number" "$tmp/bad.log" && [[ ! -e $tmp/bad-count ]] ||
    fail "$setting gave exit $rc or made its folder: $(cat "$tmp/bad.log")"
done
"$plan" --share-gpu 99999999999999999999 "$tmp/bad-count" all >"$tmp/bad.log" 2>&1
rc=$?
((rc == 2)) && grep -q "\-\-share-gpu '99999999999999999999': not a whole number" "$tmp/bad.log" ||
  fail "a huge --share-gpu gave exit $rc: $(cat "$tmp/bad.log")"

if ((failures)); then
  log "$failures failure(s)"
  exit 1
fi
log "all checks passed"
