#!/usr/bin/env bash
# From a local sweep to plots: launch/sweep.sh runs the real binary on the CPU backend
# (mpirun -np 2, configs/ci-small.yaml, the built-in --scaling 1,2 sweep, and once more one
# launch per world size), the records are checked (a record per world size, the tuned NCCL
# variables recorded, NCCL_NVLS_ENABLE=0 by default), results/plot_scaling.py draws them
# (PNG and SVG, non-trivial), `scalebench report --compare` sets the two side by side, and
# bad input is refused with a reason naming the file (and line).
#   tests/plot/test_plot_scaling.sh SCALEBENCH_BINARY SOURCE_DIR
# Exit 0 pass, 1 fail, 77 skip (only when /usr/bin/python3 cannot import matplotlib).
set -uo pipefail

bin=$(realpath "${1:?usage: test_plot_scaling.sh SCALEBENCH_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_plot_scaling.sh SCALEBENCH_BINARY SOURCE_DIR}")
py=/usr/bin/python3
plot=$src/results/plot_scaling.py
log() { echo "plot test: $*"; }
if ! "$py" -c 'import matplotlib' 2>/dev/null; then
  log "SKIP: $py cannot import matplotlib (apt-get install python3-matplotlib)"
  exit 77
fi
tmp=$(mktemp -d /tmp/scalebench-plot.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { log "FAIL: $*"; failures=$((failures + 1)); }

# --- records from the real binary, through the local sweep script -------------------------
unset NCCL_NVLS_ENABLE
export NCCL_ALGO=Ring NCCL_PROTO=Simple
sweep=("$src/launch/sweep.sh" --bin "$bin" --config "$src/configs/ci-small.yaml" --backend cpu --np 2 --no-bind)
# expect_ok LOG WHAT COMMAND...: runs COMMAND (output to LOG); a failure shows LOG and its exit code.
expect_ok() {
  local log_file=$1 what=$2; shift 2
  "$@" >"$log_file" 2>&1
  local rc=$?
  ((rc == 0)) || { cat "$log_file"; fail "$what exited $rc"; }
  return $rc
}
expect_ok "$tmp/sweep1.log" "launch/sweep.sh (one launch)" timeout 300 "${sweep[@]}" --out "$tmp/one-launch.jsonl"
expect_ok "$tmp/sweep2.log" "launch/sweep.sh --per-size" timeout 300 "${sweep[@]}" --per-size --out "$tmp/per-size.jsonl"
"$py" - "$tmp/one-launch.jsonl" "$tmp/per-size.jsonl" <<'EOF' || fail "the sweep's records are not what it ran"
import json, sys
errors = []
for path, launched in ((sys.argv[1], {1: 2, 2: 2}), (sys.argv[2], {1: 1, 2: 2})):
    records = [r for r in (json.loads(l) for l in open(path) if l.strip()) if r["subcommand"] == "train"]
    sizes = sorted(r["world_size"] for r in records)
    if sizes != [1, 2]:
        errors.append(f"{path}: world sizes {sizes}, expected [1, 2]")
    for r in records:
        n, tuning = r["world_size"], r["environment"]["tuning_variables"]
        if r["launched_world_size"] != launched[n]:
            errors.append(f"{path}: n={n} launched on {r['launched_world_size']} ranks, expected {launched[n]}")
        for key, want in (("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "Simple"), ("NCCL_NVLS_ENABLE", "0")):
            if tuning.get(key) != want:
                errors.append(f"{path}: n={n} {key}={tuning.get(key)!r}, expected {want!r}")
if errors:
    sys.exit("\n".join(errors))
print("plot test: sweep records ok")
EOF

# --- the plots ---------------------------------------------------------------------------
# comm records: from the real `scalebench comm` (MPI backend) where the binary has it;
# otherwise one record in the shape src/commands/comm_command.cpp writes (rows of size_bytes with
# out_of_place/in_place busbw), whose values are only an input for the drawing.
# (`scalebench comm --help` alone would not tell: an unknown word runs the default `train`.)
if "$bin" --help 2>/dev/null | grep -Eq '^ +comm( |$)'; then
  expect_ok "$tmp/comm.log" "scalebench comm" timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -np 2 "$bin" comm --backend mpi -b 1K -e 4M -f 4 -n 5 --out "$tmp/comm.jsonl"
else
  log "note: $bin has no comm subcommand; plotting a comm record written by this test"
  "$py" - >"$tmp/comm.jsonl" <<'EOF'
import json
rows = [{"size_bytes": b, "count": b // 4,
         "out_of_place": {"time_us": 5 + b / 2e3, "busbw_gbps": 2 * b / (b + 2**20)},
         "in_place": {"time_us": 5 + b / 2e3, "busbw_gbps": 2 * b / (b + 2**20)}} for b in (1024, 16384, 262144, 4194304)]
print(json.dumps({"schema_version": 1, "subcommand": "comm", "op": "all_reduce", "dtype": "float", "redop": "sum",
                  "world_size": 2, "backend": "mpi", "rows": rows, "environment": {"hostnames": ["plot-test"] * 2}}))
EOF
fi

out=$tmp/plots
expect_ok "$tmp/plot.log" "plot_scaling.py on good input" \
  "$py" "$plot" "$tmp/one-launch.jsonl" "$tmp/per-size.jsonl" "$tmp/comm.jsonl" -o "$out" --prefix ci-
for name in efficiency throughput breakdown busbw; do
  png=$out/ci-$name.png svg=$out/ci-$name.svg
  if [[ ! -s $png ]]; then fail "$png not written"; continue; fi
  [[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$png is not a PNG"
  (($(stat -c %s "$png") > 20000)) || fail "$png is only $(stat -c %s "$png") bytes"
  if [[ ! -s $svg ]]; then fail "$svg not written"; continue; fi
  grep -q '<svg' "$svg" || fail "$svg is not an SVG"
  (($(stat -c %s "$svg") > 20000)) || fail "$svg is only $(stat -c %s "$svg") bytes"
done
# Two files of one system and workload are two lines, named by their files (SVG keeps text as <!-- comments -->).
grep -q 'one-launch.jsonl' "$out/ci-efficiency.svg" && grep -q 'per-size.jsonl' "$out/ci-efficiency.svg" ||
  fail "the efficiency plot does not name both files' lines"
# Projected records, as `scalebench project` writes them, are drawn apart from the measured ones.
expect_ok "$tmp/project.log" "scalebench project" \
  "$bin" project --hardware "$src/configs/hardware/a100-sxm4-40gb.yaml" --config "$src/configs/ci-small.yaml" \
  --gpus 1,2 --out "$tmp/projected.jsonl"
expect_ok "$tmp/projected.log" "plot_scaling.py with projected records" \
  "$py" "$plot" "$tmp/one-launch.jsonl" "$tmp/projected.jsonl" -o "$tmp/with-projection"
grep -q 'batch 32/rank (projected)' "$tmp/with-projection/efficiency.svg" ||
  fail "projected records are not told apart in the efficiency plot"
# The breakdown stacks the phases of one step (the record's median step), so the stack is the
# step; projected panels share one y-scale, as do measured ones; titles are wrapped.
expect_ok "$tmp/project2.log" "scalebench project (a second profile)" \
  "$bin" project --hardware "$src/configs/hardware/rtx4090-24gb-pcie4-p2p.yaml" --config "$src/configs/ci-small.yaml" \
  --gpus 1,2 --out "$tmp/projected-4090.jsonl"
"$py" - "$plot" "$tmp/one-launch.jsonl" "$tmp/projected.jsonl" "$tmp/projected-4090.jsonl" <<'EOF' || fail "the breakdown plot does not stack steps"
import importlib.util, json, sys
errors = []
for line in open(sys.argv[2]):
    r = json.loads(line)
    if r["subcommand"] != "train":
        continue
    m = r["median_step"]
    parts = m["compute_ms"] + m["exposed_comm_ms"] + m["optimizer_ms"]
    if abs(parts - m["step_ms"]) > 1e-6 * m["step_ms"]:
        errors.append(f"n={r['world_size']}: phases add up to {parts}, the step is {m['step_ms']}")
    if not r["step_ms"]["min"] <= m["step_ms"] <= r["step_ms"]["max"]:
        errors.append(f"n={r['world_size']}: the median step {m['step_ms']} lies outside the steps' range")
spec = importlib.util.spec_from_file_location("plot_scaling", sys.argv[1])
plot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot)
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
train, _ = plot.load(sys.argv[2:], {}, False)
panels = sorted(train, key=lambda s: s.projected)
seen = {}
plot.save = lambda fig, *args: seen.update(axes=[(ax.get_ylim(), ax.get_title()) for ax in fig.axes if ax.get_visible()])
plot.plot_breakdown(plt, panels, "/tmp", "", ["png"], [])
limits = {}
for s, (ylim, title) in zip(panels, seen["axes"]):
    limits.setdefault(s.projected, []).append(ylim)
    if any(len(row) > 52 for row in title.split("\n")):
        errors.append(f"title not wrapped: {title!r}")
if True not in limits or len(limits[True]) < 2:
    errors.append(f"expected two projected panels, got {limits}")
for projected, ylims in limits.items():
    if len(set(ylims)) != 1:
        errors.append(f"{'projected' if projected else 'measured'} panels have different y-scales: {ylims}")
for e in errors:
    print(e, file=sys.stderr)
sys.exit(1 if errors else 0)
EOF
expect_ok "$tmp/plot2.log" "plot_scaling.py on train records alone" \
  "$py" "$plot" "$tmp/one-launch.jsonl" -o "$tmp/only-train"
grep -q 'no comm records: no busbw plot' "$tmp/plot2.log" || fail "no note that the busbw plot was left out"

# --- report --compare on the same records ---------------------------------------------------
expect_ok "$tmp/compare.md" "scalebench report --compare" \
  "$bin" report --compare "$tmp/one-launch.jsonl" "$tmp/per-size.jsonl"
grep -q '^| ranks | cpu (.*) \[one-launch.jsonl\] samples/s |' "$tmp/compare.md" &&
  grep -Eq '^\| 2 \| [0-9.]+ \| [0-9.]+% \| [0-9.]+ \| [0-9.]+ \| [0-9.]+% \|' "$tmp/compare.md" ||
  { cat "$tmp/compare.md"; fail "report --compare does not show both launches side by side"; }

# --- bad input is refused -----------------------------------------------------------------
refuses() {  # refuses WHAT EXPECTED_MESSAGE ARGS...: exit 2 and the message on stderr
  local what=$1 expected=$2; shift 2
  "$py" "$plot" "$@" -o "$tmp/bad" >"$tmp/bad.out" 2>"$tmp/bad.err"
  local rc=$?
  ((rc == 2)) || fail "$what: exit $rc, expected 2"
  grep -qF -- "$expected" "$tmp/bad.err" || fail "$what: stderr lacks '$expected': $(cat "$tmp/bad.err")"
}
refuses "missing file" "$tmp/nope.jsonl: cannot read results file: No such file or directory" "$tmp/nope.jsonl"
{ grep -m1 '"subcommand":"train"' "$tmp/one-launch.jsonl"; echo '{"subcommand": "train", "world_size": 2,'; } >"$tmp/malformed.jsonl"
refuses "malformed line" "$tmp/malformed.jsonl:2: malformed record" "$tmp/malformed.jsonl"
expect_ok "$tmp/skip.err" "plot_scaling.py --skip-bad-lines" \
  "$py" "$plot" "$tmp/malformed.jsonl" --skip-bad-lines -o "$tmp/skipped"
grep -qF "$tmp/malformed.jsonl:2: malformed record" "$tmp/skip.err" || fail "--skip-bad-lines did not name the line"
echo '[1, 2]' >"$tmp/array.jsonl"
refuses "a line that is not an object" "$tmp/array.jsonl:1: malformed record: not a JSON object" "$tmp/array.jsonl"
echo '{"subcommand": "comm", "op": "all_reduce", "world_size": 2}' >"$tmp/comm-no-rows.jsonl"
refuses "comm record without rows" "$tmp/comm-no-rows.jsonl:1: comm record has no 'rows'" "$tmp/comm-no-rows.jsonl"
echo '{"subcommand": "gemm", "tflops": 1.0}' >"$tmp/gemm.jsonl"
refuses "no usable records" "no train or comm records to plot" "$tmp/gemm.jsonl"
grep -m1 '"subcommand":"train"' "$tmp/one-launch.jsonl" | "$py" -c 'import json,sys; r=json.loads(sys.stdin.read()); del r["samples_per_s"]; print(json.dumps(r))' \
  >"$tmp/lacking.jsonl"
refuses "record lacking a field" "$tmp/lacking.jsonl:1: field 'samples_per_s' is null, expected a number" "$tmp/lacking.jsonl"
: >"$tmp/empty.jsonl"
refuses "empty file" "$tmp/empty.jsonl: no valid record in the file" "$tmp/empty.jsonl"
# Lines that are not valid records: named by FILE:LINE, exit 2, never a
# traceback; with --skip-bad-lines each is skipped with a warning and the rest is plotted.
train_line=$(grep -m1 '"subcommand":"train"' "$tmp/one-launch.jsonl")
bad_record() {  # bad_record NAME EXPECTED PYTHON-EXPRESSION-OF-THE-BAD-LINE-BYTES (r: a train record)
  local name=$1 expected=$2 expr=$3
  { echo "$train_line"; "$py" -c "import json,sys; r=json.loads(sys.argv[1]); sys.stdout.buffer.write($expr + b'\n')" "$train_line"; } \
    >"$tmp/$name.jsonl"
  refuses "$name" "$tmp/$name.jsonl:2: $expected" "$tmp/$name.jsonl"
  grep -q Traceback "$tmp/bad.err" && fail "$name: a traceback"
  expect_ok "$tmp/$name.skip" "$name with --skip-bad-lines" \
    "$py" "$plot" "$tmp/$name.jsonl" --skip-bad-lines -o "$tmp/$name-skipped"
  grep -qF "warning: $tmp/$name.jsonl:2: $expected" "$tmp/$name.skip" || fail "$name: --skip-bad-lines did not name the line"
}
bad_record non-utf8 "not UTF-8 text" "b'{\"subcommand\":\"stress\",\"config\":{\"source\":\"/tmp/r\\xc3\"}}'"
bad_record config-string "field 'config' is \"str\", expected an object" "json.dumps(dict(r, config='str')).encode()"
bad_record huge-world-size "field 'world_size' is 1000000000000000000000000000000" "json.dumps(dict(r, world_size=10**30)).encode()"
bad_record deeply-nested "malformed record" "b'{\"a\":' * 100000 + b'1' + b'}' * 100000"
echo 'garbage' >"$tmp/garbage.jsonl"
"$py" "$plot" "$tmp/garbage.jsonl" --skip-bad-lines -o "$tmp/bad" >"$tmp/bad.out" 2>"$tmp/bad.err"
(($? == 2)) && grep -qF "$tmp/garbage.jsonl: no valid record in the file" "$tmp/bad.err" ||
  fail "a file of garbage with --skip-bad-lines: $(cat "$tmp/bad.err")"
# A list naming one thing twice, as scalebench refuses it: a file under two spellings, a format.
refuses "a file given twice" "files: $tmp/./one-launch.jsonl is given twice (entries 1 and 2, as $tmp/one-launch.jsonl)" \
  "$tmp/one-launch.jsonl" "$tmp/./one-launch.jsonl"
refuses "a format given twice" "--formats: png is given twice (entries 1 and 2)" "$tmp/one-launch.jsonl" --formats png,png
refuses "bad --label" "empty NAME" "$tmp/one-launch.jsonl" --label "$tmp/one-launch.jsonl="
refuses "bad --label" "expected NAME or FILE=NAME" "$tmp/one-launch.jsonl" --label " "
bad_record negative-throughput "field 'samples_per_s' is -5, expected a number from 0 to 1e+15" \
  "json.dumps(dict(r, samples_per_s=-5)).encode()"
bad_record huge-step "step_ms: field 'median' is 1e+300, expected a number from 0 to 1e+09" \
  "json.dumps(dict(r, step_ms={'median': 1e300}, median_step=None)).encode()"
# The ranges and their reasons are results/record_ranges.json's, the table `scalebench report` is built with.
bad_record fractional-world-size "field 'world_size' is 2.5, expected a whole number" \
  "json.dumps(dict(r, world_size=2.5)).encode()"
bad_record huge-spread "field 'samples_per_s_spread' is 1e+300, expected a number from 0 to 1e+15 (a spread of the throughput" \
  "json.dumps(dict(r, samples_per_s_spread=1e300)).encode()"
# A name from a record is text in a plot, never matplotlib's math ($\frac$ would not parse).
"$py" -c 'import json,sys; r=json.loads(sys.argv[1]); r["environment"]["hostnames"]=["a$\\frac$b"]; print(json.dumps(r))' \
  "$train_line" >"$tmp/dollar.jsonl"
expect_ok "$tmp/dollar.log" "a host name holding \$" "$py" "$plot" "$tmp/dollar.jsonl" -o "$tmp/dollar"
# A name in another script (a glyph the font lacks) or starting with _ (which matplotlib leaves out
# of a legend) is drawn without a warning on stderr.
"$py" -c 'import json,sys; r=json.loads(sys.argv[1]); r["environment"]["hostnames"]=["_\u65e5\u672c"]; print(json.dumps(r))' \
  "$train_line" >"$tmp/glyph.jsonl"
"$py" "$plot" "$tmp/glyph.jsonl" -o "$tmp/glyph" >"$tmp/glyph.out" 2>"$tmp/glyph.err" || fail "a host name in another script: exit $?"
grep -v '^plot_scaling.py: note:' "$tmp/glyph.err" | grep -q . && fail "a host name in another script: warnings: $(cat "$tmp/glyph.err")"
# A run that diverged (loss_check.passed false: ci-small at lr 1e30 exits 3) is no throughput
# figure: its records are left out, with one warning line naming the file; alone, exit 2.
"$py" -c 'import json,sys; r=json.loads(sys.argv[1]); r["loss_check"]={"passed": False, "first_nonfinite_step": 2}; print(json.dumps(r))' \
  "$train_line" >"$tmp/diverged.jsonl"
refuses "a diverged run alone" "no train or comm records to plot (only records of ranks sharing a GPU or of diverged runs" "$tmp/diverged.jsonl"
cat "$tmp/one-launch.jsonl" "$tmp/diverged.jsonl" >"$tmp/with-diverged.jsonl"
expect_ok "$tmp/diverged.log" "a diverged run beside good ones" "$py" "$plot" "$tmp/with-diverged.jsonl" -o "$tmp/diverged"
[[ $(grep -c "warning:.*diverged" "$tmp/diverged.log") == 1 ]] &&
  grep -qF "warning: $tmp/with-diverged.jsonl: 1 record(s) of runs that diverged (loss check failed" "$tmp/diverged.log" ||
  fail "a diverged run not left out with one warning line: $(cat "$tmp/diverged.log")"
bad_record loss-check-not-bool "field 'loss_check.passed' is \"no\", expected true or false" \
  "json.dumps(dict(r, loss_check={'passed': 'no'})).encode()"

# --- an output that cannot be written: one line, no traceback, nothing left behind ---------
refuses_output() {  # refuses_output WHAT EXIT EXPECTED_MESSAGE ARGS...
  local what=$1 code=$2 expected=$3; shift 3
  "$py" "$plot" "$tmp/one-launch.jsonl" "$@" >"$tmp/out.out" 2>"$tmp/out.err"
  local rc=$?
  ((rc == code)) || fail "$what: exit $rc, expected $code: $(cat "$tmp/out.err")"
  grep -qF -- "$expected" "$tmp/out.err" || fail "$what: stderr lacks '$expected': $(cat "$tmp/out.err")"
  grep -q Traceback "$tmp/out.err" && fail "$what: a traceback"
  (($(grep -c . "$tmp/out.err") == 1)) || fail "$what: more than one line: $(cat "$tmp/out.err")"
}
touch "$tmp/a-file"
refuses_output "a file as the folder" 2 "-o $tmp/a-file/plots: $tmp/a-file is not a folder" -o "$tmp/a-file/plots"
refuses_output "a folder that cannot be made" 2 "-o /proc/scalebench-plots: cannot create folders in /proc" \
  -o /proc/scalebench-plots
mkdir -p "$tmp/taken/efficiency.png"
refuses_output "a plot's path that is a folder" 2 "-o $tmp/taken: $tmp/taken/efficiency.png exists and is not a regular file" \
  -o "$tmp/taken"
[[ -z $(ls -A "$tmp/taken/efficiency.png") ]] || fail "a refused plot left files behind"
"$py" "$plot" "$tmp/one-launch.jsonl" -o "$tmp/to-full" >/dev/full 2>"$tmp/out.err"
rc=$?
((rc == 1)) && grep -qF "cannot write the standard output: No space left on device" "$tmp/out.err" &&
  ! grep -q Traceback "$tmp/out.err" || fail "stdout on /dev/full: exit $rc: $(cat "$tmp/out.err")"
# A read-only folder and a full disk, on small file systems mounted here (root only).
mkdir -p "$tmp/ro" "$tmp/small"
if mount -t tmpfs -o size=64k,ro tmpfs "$tmp/ro" 2>/dev/null; then
  refuses_output "a read-only folder" 2 "-o $tmp/ro: cannot write in $tmp/ro: Read-only file system" -o "$tmp/ro"
  umount "$tmp/ro"
  mount -t tmpfs -o size=64k tmpfs "$tmp/small"
  refuses_output "a full disk" 1 "cannot write the plot: No space left on device" -o "$tmp/small" --formats svg,png
  for f in "$tmp"/small/*; do
    [[ -e $f ]] || continue
    "$py" -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$f" 2>/dev/null || [[ $f == *.png ]] ||
      fail "a full disk left a partial plot: $f"
  done
  umount "$tmp/small"
else
  log "note: cannot mount a tmpfs here (not root): the read-only folder and full disk cases are not run"
fi

# --label NAME merges the two files of one system into one line, named NAME.
expect_ok "$tmp/merged.log" "plot_scaling.py --label" \
  "$py" "$plot" "$tmp/one-launch.jsonl" "$tmp/per-size.jsonl" --label "ci box" -o "$tmp/merged"
grep -q 'ci box: ci-small' "$tmp/merged/efficiency.svg" && ! grep -q 'per-size.jsonl' "$tmp/merged/efficiency.svg" ||
  fail "--label NAME did not merge the files into one line named NAME"

if ((failures)); then log "$failures failure(s)"; exit 1; fi
log "PASS"
