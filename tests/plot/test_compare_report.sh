#!/usr/bin/env bash
# `scalebench compare --report FILE.md` end to end: the real binary judges two scenario presets
# (the shipped small-experiments one and a one-workload production preset over configs/ci-small.yaml,
# quick to project) on three profiles, results/compare_report.py renders the Markdown and every plot
# (throughput and efficiency against GPUs with bands, per-cost and per-kW bars, per workload of each
# scenario); every image the report links exists and is a non-trivial PNG; the summary table, the
# card tests and the sources are there; with --nodes 2 the plots and tables carry the two-node
# configurations; the production preset's soak line says "not measured"; bad input exits 2 before any work.
#   tests/plot/test_compare_report.sh SCALEBENCH_BINARY SOURCE_DIR
# Exit 0 pass, 1 fail, 77 skip (only when /usr/bin/python3 cannot import matplotlib).
set -uo pipefail

bin=$(realpath "${1:?usage: test_compare_report.sh SCALEBENCH_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_compare_report.sh SCALEBENCH_BINARY SOURCE_DIR}")
log() { echo "compare report test: $*"; }
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  log "SKIP: /usr/bin/python3 cannot import matplotlib (apt-get install python3-matplotlib)"
  exit 77
fi
tmp=$(mktemp -d /tmp/scalebench-compare-report.XXXXXX)
trap 'umount "$tmp/full" 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
fail() { log "FAIL: $*"; failures=$((failures + 1)); }
cd "$tmp" || exit 1

cat > tiny-production.yaml <<'YAML'
scenario: tiny production
gpus: 8
requires: [ecc, datacenter_use, vendor_driver, soak]
workloads: [ci-small.yaml]
YAML
profiles=a100-sxm4-40gb,rtx4090-48gb-pcie4,rtx4090-48gb-pcie4-p2p
# The shipped profiles without the framework's per-step cost (node.framework_step_ms, 3.25 ms at N > 1):
# ci-small's sub-millisecond step would leave no 8-GPU answer, and the rules are what this test reads.
mkdir profiles
for f in "$src"/configs/hardware/*.yaml; do
  sed 's/^node:$/node:\n  framework_step_ms: {value: 0, source: "test: the rules without the framework cost"}/' "$f" \
    >"profiles/$(basename "$f")"
done
mkdir out
if ! "$bin" compare --hardware $profiles --profile-dir "$tmp/profiles" \
    --scenario small-experiments,"$tmp/tiny-production.yaml" --report out/guide.md >run.log 2>&1; then
  cat run.log; fail "compare --report exited non-zero"
fi
[ -s out/guide.md ] || fail "out/guide.md not written"
[ -s out/guide.json ] || fail "out/guide.json not written"
# Every linked image exists and is a PNG of some size; 3 per (workload, GPU count): bert-base and
# resnet50 at 1 GPU, ci-small at 8.
links=$(grep -o '](guide-plots/[^)]*)' out/guide.md | sed 's/^](//; s/)$//')
count=0
for f in $links; do
  count=$((count + 1))
  if [ ! -s "out/$f" ] || [ "$(head -c 4 "out/$f" | tail -c 3)" != "PNG" ] || [ "$(stat -c %s "out/$f")" -lt 10000 ]; then
    fail "plot $f missing, not a PNG or trivially small"
  fi
done
[ "$count" -eq 9 ] || fail "expected 9 plots linked, found $count"
for kind in throughput efficiency per-cost; do
  grep -q "ci-small-b32-8gpu-$kind.png\|ci-small.*-8gpu-$kind.png" out/guide.md || fail "no ci-small $kind plot linked"
done
for text in "| scenario | workload | ample budget | limited budget |" "| tiny production | ci-small" \
    "## Card tests (one GPU)" "| a100-sxm4-40gb | GEMM fp16 8192^3 |" "## Sources: every profile number" \
    "| gpu.price_usd | 10000 |" "| node.link_efficiency | 0.26 [0.187-0.7] |" "ECC optional (not on by default)" \
    "- a100-sxm4-40gb: soak not measured" "soak not measured; excluded:" \
    "Ties: a profile ties with the best when each central score lies inside the other's band" \
    "leave out the compute model's own error"; do
  grep -qF -- "$text" out/guide.md || fail "guide.md lacks: $text"
done

# --nodes 2: the production preset judged on two nodes; its plots draw them (dashed) and are named for them.
mkdir nodes
if ! "$bin" compare --hardware $profiles --profile-dir "$tmp/profiles" --nodes 2 \
    --scenario "$tmp/tiny-production.yaml" --report nodes/guide.md >nodes.log 2>&1; then
  cat nodes.log; fail "compare --nodes 2 --report exited non-zero"
fi
for kind in throughput efficiency per-cost; do
  f=guide-plots/ci-small-b32-8gpu-2nodes-$kind.png
  grep -qF "]($f)" nodes/guide.md && [ -s "nodes/$f" ] || fail "--nodes 2: $f not linked or not written"
done
for text in "Judged at 8 GPUs per node on 2 nodes" "| 2 nodes | efficiency on 2 nodes |" "| 16 GPUs: " \
    "at 16 GPUs on 2 nodes x 8"; do
  grep -qF -- "$text" nodes/guide.md || fail "--nodes 2: guide.md lacks: $text"
done

# Bad input: exit 2 with a reason, and nothing written.
expect_2() {  # WHAT PATTERN COMMAND...
  local what=$1 pattern=$2; shift 2
  "$@" >bad.log 2>&1; local rc=$?
  [ $rc -eq 2 ] || { cat bad.log; fail "$what: exit $rc, expected 2"; }
  grep -q -- "$pattern" bad.log || { cat bad.log; fail "$what: no '$pattern' in the message"; }
}
expect_2 "report beside --config" "give it without --config" \
  "$bin" compare --hardware a100-sxm4-40gb --config "$src/configs/ci-small.yaml" --report x.md
expect_2 "report into a missing folder" "no directory" "$bin" compare --hardware a100-sxm4-40gb --report nope/x.md
expect_2 "unknown scenario" "no such scenario" "$bin" compare --hardware a100-sxm4-40gb --scenario nope --report y.md
expect_2 "no nodes" "--nodes: must be >= 1, got 0" "$bin" compare --hardware a100-sxm4-40gb --nodes 0 --report y.md
[ ! -e x.md ] && [ ! -e y.md ] && [ ! -e y.json ] || fail "a refused run wrote a file"
echo '{"workloads": []}' > bad.json
expect_2 "the renderer on other JSON" "key 'scenarios' missing" /usr/bin/python3 "$src/results/compare_report.py" bad.json z.md
# Hostile input to the renderer: one line, exit 2, nothing written (tool_input.py reads every input).
mkfifo fifo.json
expect_2 "the renderer on a FIFO" "it is a FIFO, not a regular file" timeout 20 /usr/bin/python3 "$src/results/compare_report.py" fifo.json z.md
expect_2 "the renderer on /dev/zero" "it is a device, not a regular file" timeout 20 /usr/bin/python3 "$src/results/compare_report.py" /dev/zero z.md
python3 -c 'print("[" * 100000 + "]" * 100000)' > deep.json
expect_2 "the renderer on deep JSON" "nested too deep" /usr/bin/python3 "$src/results/compare_report.py" deep.json z.md
# Every field of a real guide mutated to the wrong type: each refused in one line, no partial output.
/usr/bin/python3 - out/guide.json <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
def paths(node, at=()):
    yield at
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, at + (k,))
    elif isinstance(node, list) and node:
        yield from paths(node[0], at + (0,))
picked = [p for p in paths(data) if p][::5][:12]
for i, p in enumerate(picked):
    mutated = json.loads(json.dumps(data))
    node = mutated
    for k in p[:-1]:
        node = node[k]
    node[p[-1]] = {"x": [None]} if not isinstance(node[p[-1]], dict) else "text"
    json.dump(mutated, open(f"mutated-{i}.json", "w"))
PY
for m in mutated-*.json; do
  /usr/bin/python3 "$src/results/compare_report.py" "$m" z.md >bad.log 2>&1; rc=$?
  { [ $rc -eq 0 ] || [ $rc -eq 2 ]; } && [ "$(wc -l <bad.log)" -eq 1 ] || { cat bad.log; fail "$m: exit $rc or more than one line"; }
  [ $rc -eq 0 ] || { [ ! -e z.md ] && [ ! -e z-plots ]; } || fail "$m: refused but wrote z.md or z-plots"
  rm -rf z.md z-plots
done
mkdir ro && chmod 555 ro
if [ "$(id -u)" != 0 ] || ! touch ro/probe 2>/dev/null; then
  expect_2 "the renderer into a read-only folder" "cannot write in" /usr/bin/python3 "$src/results/compare_report.py" out/guide.json ro/g.md
fi
chmod 755 ro
# A profile name with | and a newline cannot break the guide's tables.
/usr/bin/python3 -c 'import json,sys; d=json.load(open("out/guide.json")); d["profiles"][0]["name"]="evil | name\nrow"; json.dump(d, open("evil.json","w"))'
/usr/bin/python3 "$src/results/compare_report.py" evil.json evil.md >/dev/null 2>&1 || fail "a | in a profile name refused"
grep -qF 'evil \| name\x0arow' evil.md || fail "the | and newline of a profile name not escaped in evil.md"

# Impossible figures are never printed: every figure the guide prints or draws is read through
# tool_input.py's range check (results/record_ranges.json, GUIDE_FIGURES), one line, exit 2,
# nothing written; a profile number the card row prints must keep its source row.
impossible() {  # impossible NAME EXPECTED PYTHON-STATEMENT (d: the guide)
  /usr/bin/python3 -c "import json; d=json.load(open('out/guide.json')); $3; json.dump(d, open('$1.json', 'w'))"
  /usr/bin/python3 "$src/results/compare_report.py" "$1.json" z.md >bad.log 2>&1; local rc=$?
  { [ $rc -eq 2 ] && [ "$(wc -l <bad.log)" -eq 1 ] && grep -qF -- "$2" bad.log; } ||
    { cat bad.log; fail "$1: exit $rc, expected 2 with one line holding '$2'"; }
  [ ! -e z.md ] && [ ! -e z-plots ] || fail "$1: refused but wrote z.md or z-plots"
  rm -rf z.md z-plots
}
impossible negative-throughput "by_gpus[0].samples_per_s' is -1, expected a number from 0 to 1e+15" \
  'd["workloads"][0]["profiles"][0]["by_gpus"][0]["samples_per_s"] = -1'
impossible huge-throughput "by_gpus[1].samples_per_s' is 1e+308" \
  'd["workloads"][0]["profiles"][0]["by_gpus"][1]["samples_per_s"] = 1e308'
impossible infinite-memory "memory_per_gpu_gib' is Infinity, expected a number" \
  'd["workloads"][0]["profiles"][0]["memory_per_gpu_gib"] = float("inf")'
impossible nan-band "samples_per_s_band[1]' is NaN, expected a number" \
  'd["workloads"][0]["profiles"][0]["by_gpus"][0]["samples_per_s_band"][1] = float("nan")'
impossible tiny-price "card.price_usd' is 1e-06, expected a number from 50 to 1e+06" \
  'd["profiles"][0]["card"]["price_usd"] = 1e-6'
impossible true-throughput "by_gpus[0].samples_per_s' is true, expected a number" \
  'd["workloads"][0]["profiles"][0]["by_gpus"][0]["samples_per_s"] = True'
impossible tiny-profile-price "gpu.price_usd.value' is 1e-06, expected a number from 50" \
  'd["profiles"][1]["hardware"]["gpu"]["price_usd"]["value"] = 1e-6'
impossible missing-price "profiles[1].hardware.gpu.price_usd missing" 'del d["profiles"][1]["hardware"]["gpu"]["price_usd"]'
impossible nan-profile-number "node.link_efficiency.value' is NaN" \
  'd["profiles"][0]["hardware"]["node"]["link_efficiency"]["value"] = float("nan")'
# The profile keys the guide checks hold the bounds the C++ profile reader holds them to.
for key in price_usd tdp_w copy_gbps memory_gb; do
  /usr/bin/python3 - "$src" "$key" <<'PY' || fail "record_ranges.json's $key differs from src/projection/profile_ranges.cpp's"
import json, re, sys
src, key = sys.argv[1], sys.argv[2]
r = json.load(open(f"{src}/results/record_ranges.json"))["ranges"][key]
m = re.search(r'\{"%s", \{([^,]+), \w+, ([^,]+), \w+,' % key, open(f"{src}/src/projection/profile_ranges.cpp").read())
sys.exit(0 if m and float(m.group(1)) == r["min"] and float(m.group(2)) == r["max"] else 1)
PY
done
# A name in another script, with a $ or a leading _, is drawn as text without warnings on stderr.
/usr/bin/python3 -c 'import json; d=json.load(open("out/guide.json")); n="_\u65e5\u672c $x^2$"; d["profiles"][0]["name"]=n
for w in d["workloads"]: w["profiles"][0]["name"]=n
json.dump(d, open("glyph.json","w"))'
/usr/bin/python3 "$src/results/compare_report.py" glyph.json glyph.md >glyph.out 2>glyph.err || fail "a name in another script: exit $?"
[ ! -s glyph.err ] || fail "a name in another script: stderr: $(head -3 glyph.err)"
# A full disk (a 64 KiB tmpfs, where this test may mount one): one line, exit 1, nothing left.
mkdir full
if mount -t tmpfs -o size=64k tmpfs full 2>/dev/null; then
  /usr/bin/python3 "$src/results/compare_report.py" out/guide.json full/g.md >full.log 2>&1; rc=$?
  { [ $rc -eq 1 ] && [ "$(wc -l <full.log)" -eq 1 ] && grep -qF "No space left on device" full.log; } ||
    { cat full.log; fail "a full disk: exit $rc, expected 1 with one line"; }
  [ -z "$(ls -A full)" ] || fail "a full disk: left $(ls -A full)"
  umount full
else
  log "full disk not tried: cannot mount a tmpfs here"
fi

if [ $failures -ne 0 ]; then log "$failures failure(s)"; exit 1; fi
log "PASS"
