#!/usr/bin/env bash
# The multi-GPU measurement on the GPUs of one machine (docs/multi-gpu.md), in three
# calls of at most ten minutes each:
#   part1  build; the GPU test suite under mpirun -np N (each rank's results in details/gtest/rankR.xml);
#          comm --op all over 1,2,4,8 (<= N, and N);
#          a peer SIGKILLed and one SIGSTOPped in the middle of training (N >= 2); with --share-gpu,
#          each fault and a peer whose CUDA work fails, FAULT_REPS times (default 10)
#   part2  train --scaling 1,2,4,8 (<= N, and N) of the six workloads (CUDA graphs on, bucket_mb
#          25) with their one-GPU op profiles; PyTorch DDP on the same GPUs and workloads
#          (tests/reference/ddp_bench.py); `project --hardware h200-sxm --calibrate` from the
#          one-GPU records
#   part3  the variants, at 1 and N GPUs, in this order while the call's time lasts: CUDA graphs
#          off at bucket_mb 25, on at 1 and at 100 (each setting against the scaling runs'), then
#          off at 1 and at 100
#   all    the three in turn (more than ten minutes on GPUs)
# Everything goes under OUTDIR/details (logs, records, generated configs); every call ends by
# writing the tables (OUTDIR/*.md, launch/multi_gpu_tables.py) from whatever OUTDIR holds, packing
# OUTDIR/details into OUTDIR/details-PART.tar.gz and printing OUTDIR/summary.md last. With
# --return DIR (the device's $OUT) the tables and the archive are copied there: 7 files.
# A step that finished is not run again in the same OUTDIR, so a call cut short can be repeated.
# Each call stops starting steps that would not end within PLAN_BUDGET_S (default 540) seconds;
# exit 1 when a step of the call failed or timed out, 2 on bad arguments.
#
#   launch/multi_gpu_plan.sh [--cpu | --share-gpu N] [--dry-run] [--return DIR] OUTDIR [part1|part2|part3|all]
# --dry-run: print each step's command instead of running it (N from nvidia-smi, else NP).
# --cpu: the rehearsal on CPU ranks (CI-sized configs, mpirun -np ${NP:-2} --oversubscribe, the
# MPI backend, DDP over gloo when torch imports) with an existing CPU build (build/, or the binary
# SCALEBENCH_BIN names); its figures say nothing about GPUs.
# --share-gpu N: the rehearsal on the GPU(s) at hand, N ranks sharing them (scalebench's
# --share-gpu, each rank its own NCCL host identity; the GPU suite is its SharedGpu* tests,
# the faults run on a small workload, timeout 8 s; no op profiles or projections; the ranks are
# clients of an MPS daemon the call starts where nvidia-cuda-mps-control exists, but in the
# faults): the multi-rank path on a one-GPU machine, whose figures are not hardware figures.
# Environment: PYTHON (default python3), BUILD_DIR, SCALEBENCH_BIN, PLAN_BUDGET_S, NP (--cpu), FAULT_REPS,
# PLAN_VARIANTS (part3's graphs:bucket_mb pairs, default "off:25 on:1 on:100 off:1 off:100").
set -uo pipefail

usage() { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "multi_gpu_plan.sh: $*" >&2; exit 2; }
source "$(dirname "${BASH_SOURCE[0]}")/options.sh"

command_line="$0 $*"
mode=gpu dry_run=0 return_dir="" share=0 positional=()
while (($#)); do
  case $1 in
    --cpu) mode=cpu; shift ;;
    --dry-run) dry_run=1; shift ;;
    --share-gpu) needs_value multi_gpu_plan.sh "$@"; whole_count multi_gpu_plan.sh --share-gpu "$2"; share=$((10#$2)); shift 2 ;;
    --return) [[ $# -ge 2 ]] || die "--return needs a folder"; return_dir=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) positional+=("$1"); shift ;;
  esac
done
((${#positional[@]} >= 1 && ${#positional[@]} <= 2)) || { usage >&2; exit 2; }
part=${positional[1]:-all}
[[ $mode == cpu ]] && ((share)) && die "--cpu and --share-gpu: choose one"
case $part in part1|part2|part3|all) ;; *) die "'$part': expected part1, part2, part3 or all" ;; esac
if [[ -n $return_dir ]]; then
  return_dir=$(cd "$return_dir" 2>/dev/null && pwd) || die "--return $return_dir: not a folder"
fi
# The settings from the environment, checked before any folder is made (launch/options.sh).
budget=${PLAN_BUDGET_S:-540}
whole_count multi_gpu_plan.sh PLAN_BUDGET_S "$budget" 0
budget=$((10#$budget))
variants=${PLAN_VARIANTS-"off:25 on:1 on:100 off:1 off:100"}
for v in $variants; do
  [[ $v =~ ^(on|off):(1|25|100)$ ]] || die "PLAN_VARIANTS: '$v' is not graphs:bucket_mb with on|off and 1|25|100"
done
if [[ -n ${NP:-} ]]; then whole_count multi_gpu_plan.sh NP "$NP"; NP=$((10#$NP)); fi
fault_reps=${FAULT_REPS:-1}
((share)) && fault_reps=${FAULT_REPS:-10}
whole_count multi_gpu_plan.sh FAULT_REPS "$fault_reps"
fault_reps=$((10#$fault_reps))
mkdir -p "${positional[0]}" || die "${positional[0]}: cannot create the folder"
out=$(cd "${positional[0]}" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
details=$out/details
mkdir -p "$details"/{logs,done,configs,train,opprof,project,faults} || die "$details: cannot create"
python=${PYTHON:-python3}
start=$SECONDS
# Never NVLink multicast: it can take the host's shared GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

# ---- the machine and the workloads
if [[ $mode == gpu ]]; then
  if ((dry_run)) && ! command -v nvidia-smi >/dev/null 2>&1; then
    N=${NP:-8}
  else
    command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found (no GPU machine?); --cpu rehearses on CPU ranks"
    N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  fi
  ((share && N > 0)) && N=$share
  ((N > 0)) || die "no GPU: nvidia-smi lists none"
  backend=cuda comm_backend=nccl hardware=h200-sxm
  build_dir=${BUILD_DIR:-build-gpu}
  # label preset batch (the presets' own batch but bert-base's second one); the DDP peer's name
  workloads=("mlp-large configs/mlp-large.yaml 1024 mlp-large"
             "bert-base-b32 configs/bert-base.yaml 32 bert-base"
             "bert-base-b256 configs/bert-base.yaml 256 bert-base"
             "bert-large configs/bert-large.yaml 32 bert-large"
             "gpt2-small configs/gpt2-small.yaml 8 gpt2-small"
             "resnet50 configs/resnet50.yaml 256 resnet50")
  comm_sizes=(-b 8 -e 1G -f 4)
  # The fault runs: mlp-large (2.2 GB of gradients a step: bucket all-reduces are in flight most
  # of a step at N GPUs), graphs off (the error names the collective, not the graph). 1000 steps:
  # about 10 s at n = 1, then 15-20 s of N-rank steps, which the signal 12 s after the n = 1
  # record lands in after the N-rank model is built. The timeout, 30 s, is longer than the n = 1
  # phase: the idle ranks wait for rank 0 that long in a barrier, and rank 0 answers their pings
  # only from its next MPI wait (its CUDA steps make none).
  fault_config=$details/configs/mlp-large.yaml fault_steps=1000 fault_timeout=30 fault_delay=12
  ddp_flags=(--device cuda --precision bf16)
  if ((share)); then
    # Ranks sharing a GPU talk through NCCL's socket transport at well under 1 GB/s: a small
    # workload keeps a fault's run short (4000 steps of ci-small, ~9 ms each at 2 ranks, fill
    # the N-rank phase well past the signal). Timeout 8 s: a rank busy in CUDA start-up while
    # its peers wait in MPI has 8 s and the 4 s grace to answer their pings; a SIGSTOP run
    # then lasts ~15 s (start-up, n = 1, the 3 s delay, the timeout), SIGKILL ~7, CUDA ~5.
    fault_config=configs/ci-small.yaml fault_steps=4000 fault_timeout=8 fault_delay=3
    comm_sizes=(-b 8 -e 16M -f 16)
    ddp_flags+=(--share-gpu)
  fi
else
  N=${NP:-2}
  backend=cpu comm_backend=mpi hardware=h200-sxm
  build_dir=${BUILD_DIR:-build}
  workloads=("mlp-ci configs/ci-small.yaml 32 mlp-ci"
             "transformer-ci configs/ci-transformer.yaml 8 -"
             "resnet-ci configs/ci-resnet.yaml 8 resnet-ci")
  comm_sizes=(-b 8 -e 1M -f 16)
  # CPU steps of ci-small take ~0.3 ms: 30000 keep the n = 2 phase running ~9 s, past the 1 s delay.
  fault_config=$details/configs/mlp-ci.yaml fault_steps=30000 fault_timeout=3 fault_delay=1
  ddp_flags=(--device cpu --precision fp32)
fi
sizes=1
for ((s = 2; s <= N; s *= 2)); do sizes+=",$s"; done
[[ ,$sizes, == *,$N,* ]] || sizes+=",$N"
ends=1
((N > 1)) && ends+=",$N"
mpirun=(mpirun --bind-to none --oversubscribe)
share_flag=()
((share)) && share_flag=(--share-gpu)
[[ $EUID -eq 0 ]] && mpirun+=(--allow-run-as-root)
if [[ -n ${SCALEBENCH_BIN:-} ]]; then
  bin=$SCALEBENCH_BIN
  [[ -x $bin ]] || die "SCALEBENCH_BIN $bin: not an executable"
else
  bin=$build_dir/scalebench
fi

# A preset with its batch set, under details/configs/LABEL.yaml: train and project read the
# same file, so a record's config.source names the workload.
for w in "${workloads[@]}"; do
  read -r label preset batch _ <<<"$w"
  [[ -r $preset ]] || die "$preset: missing preset"
  grep -q '^batch_size: *[0-9]' "$preset" || die "$preset: no 'batch_size: N' line to set"
  sed "s/^batch_size: *[0-9]*/batch_size: $batch/" "$preset" >"$details/configs/$label.yaml"
done

{
  echo "part $part, mode $mode, N=$N, scaling $sizes, started $(date -u +%FT%TZ) on $(hostname)"
  echo "command: $command_line"
} >>"$details/plan.txt"

# ---- steps
# run_step NAME EST_S LIMIT_S OUTPUT -- CMD...: runs CMD (output to details/logs/NAME.log) unless
# it finished before in this OUTDIR or this call's budget cannot fit EST_S more seconds; OUTPUT
# (a file, or -) is removed first so a repeated step starts clean. Ends within LIMIT_S and the
# budget (TERM, then KILL 15 s later: mpirun passes TERM on and rank 0 writes the incomplete
# record). One line per step in details/steps.tsv.
run_step() {
  local name=$1 est=$2 limit=$3 output=$4
  shift 5
  if [[ -e $details/done/$name ]]; then
    echo "== $name: done in an earlier call"
    return 0
  fi
  if ((dry_run)); then
    printf '== %s (about %s s):' "$name" "$est"
    printf ' %q' "$@"
    echo
    return 0
  fi
  local left=$((budget - (SECONDS - start)))
  if ((est > left)); then
    echo "== $name: skipped: about ${est} s needed, ${left} s left of this call's ${budget} s"
    printf '%s\t%s\tskipped (time)\t-\t0\n' "$part" "$name" >>"$details/steps.tsv"
    return 1
  fi
  ((limit > left)) && limit=$left
  [[ $output != - ]] && rm -f "$output"
  local t0=$SECONDS rc status
  echo "== $name ..."
  timeout --kill-after=15 "$limit" "$@" >"$details/logs/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok; touch "$details/done/$name" ;;
    124|137) status="timed out after ${limit} s" ;;
    *) status="failed (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$part" "$name" "$status" "$rc" "$((SECONDS - t0))" >>"$details/steps.tsv"
  echo "   $status in $((SECONDS - t0)) s"
  ((rc == 0)) || tail -n 5 "$details/logs/$name.log" | sed 's/^/   | /'
  return $rc
}

skip() {  # NAME REASON: a step this machine cannot run, said once
  echo "== $1: skipped: $2"
  [[ -e $details/done/$1 ]] || printf '%s\t%s\tskipped (%s)\t-\t0\n' "$part" "$1" "$2" >>"$details/steps.tsv"
}

build() {  # TARGETS...
  [[ -n ${SCALEBENCH_BIN:-} ]] && return 0
  local configure=(-DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  [[ $mode == cpu ]] && configure=(-DCMAKE_BUILD_TYPE=Release -DSCALEBENCH_CUDA=OFF)
  rm -f "$details/done/build"  # always: cmake decides what is out of date
  local est=240
  [[ -f $build_dir/CMakeCache.txt ]] && est=60
  run_step build "$est" 540 - -- bash -c '
    if [[ ! -f $0/CMakeCache.txt ]]; then cmake -S . -B "$0" "${@:2}" || exit; fi
    cmake --build "$0" -j"$(nproc)" --target $1' "$build_dir" "$*" "${configure[@]}" || {
    echo "multi_gpu_plan.sh: the build failed (details/logs/build.log); nothing else can run"
    return 1
  }
}

machine_records() {
  ((dry_run)) || [[ -s $details/machine.txt ]] && return 0
  { nvidia-smi; nvidia-smi topo -m; } >"$details/machine.txt" 2>&1 || lscpu >"$details/machine.txt" 2>&1
}

# The MPS daemon with --share-gpu: ranks sharing a GPU as clients of one MPS server moved the
# all_reduce of 64 MiB at 2 ranks from 2.16 to 2.83 GB/s busbw against time slicing (docs/multi-gpu.md,
# "What the fabric is"), so the mode's runs use it where nvidia-cuda-mps-control exists: a daemon of
# this call's own (its pipe folder under /tmp, named in CUDA_MPS_PIPE_DIRECTORY, which the records
# keep), stopped before the faults and when the call ends.
mps_dir=""
mps_start() {
  ((share)) && [[ -z $mps_dir ]] && command -v nvidia-cuda-mps-control >/dev/null 2>&1 || return 0
  if ((dry_run)); then
    echo "== mps: nvidia-cuda-mps-control -d (CUDA_MPS_PIPE_DIRECTORY a folder of its own under /tmp)"
    return 0
  fi
  mps_dir=$(mktemp -d /tmp/sb-mps.XXXXXX)
  export CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe CUDA_MPS_LOG_DIRECTORY=$mps_dir/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    echo "== mps: daemon started ($CUDA_MPS_PIPE_DIRECTORY)"
  else
    echo "== mps: the daemon did not start; the ranks time-slice the GPU"
    mps_stop
  fi
}
mps_stop() {
  [[ -n $mps_dir ]] || return 0
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
  mkdir -p "$details/mps-log"
  cp "$mps_dir"/log/* "$details/mps-log/" 2>/dev/null
  rm -rf "$mps_dir"
  mps_dir=""
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  echo "== mps: daemon stopped"
}
trap mps_stop EXIT

faults() {
  if ((N < 2)); then
    skip fault_kill "a peer fault needs 2 or more GPUs; this machine has $N"
    skip fault_stop "a peer fault needs 2 or more GPUs; this machine has $N"
    return 0
  fi
  local sig rep kinds=(KILL STOP)
  ((share)) && kinds+=(CUDA)
  for sig in "${kinds[@]}"; do
    for ((rep = 1; rep <= fault_reps; rep++)); do
      local name=fault_${sig,,} records=$details/faults/$sig.jsonl
      ((fault_reps > 1)) && name+=.$rep records=$details/faults/$sig.$rep.jsonl
      local est=90  # the timeout, the watchdog's grace, the ranks' start-up; less for a small shared run
      # Shared: 10 of each in 10 x (16 + 8 + 6) = 300 s of estimates; ~260 s at the H200's run times.
      ((share)) && est=$(case $sig in STOP) echo $((fault_timeout + 8)) ;; KILL) echo 8 ;; *) echo 6 ;; esac)
      run_step "$name" "$est" 240 "$records" -- "$python" tests/faults/peer_fault.py --signal "$sig" \
        --rank $((N - 1)) --timeout-s "$fault_timeout" --delay-s "$fault_delay" --records "$records" \
        --stderr "${records%.jsonl}.err" --report "$details/faults/report.jsonl" -- \
        "${mpirun[@]}" -np "$N" "$bin" train --config "$fault_config" --backend "$backend" "${share_flag[@]}" \
        --cuda-graphs false --scaling "$ends" --steps "$fault_steps" --warmup 5 --out "$records"
    done
  done
}

# train LABEL GRAPHS(on|off) BUCKET_MB SIZES [extra train flags...]
train() {
  local label=$1 graphs=$2 bucket=$3 list=$4
  shift 4
  local name=train.$label.graphs-$graphs.bucket-$bucket flag=true
  [[ $graphs == off ]] && flag=false
  run_step "$name" "$([[ $list == "$sizes" ]] && echo 60 || echo 25)" 300 "$details/train/$name.jsonl" -- \
    "${mpirun[@]}" -np "$N" "$bin" train --config "$details/configs/$label.yaml" --backend "$backend" "${share_flag[@]}" \
    --scaling "$list" --cuda-graphs "$flag" --bucket-mb "$bucket" --out "$details/train/$name.jsonl" "$@"
}

ddp() {
  local runs=() w label peer batch
  for w in "${workloads[@]}"; do
    read -r label _ batch peer <<<"$w"
    [[ $peer != - ]] && runs+=(--workload "$peer:$batch")
  done
  if ((!dry_run)) && ! "$python" -c 'import torch' 2>/dev/null; then
    skip ddp "$python cannot import torch"
    return 0
  fi
  local launcher=("$python" -m torch.distributed.run --standalone --nproc_per_node "$N")
  # torch 1.13's launcher on Python 3.11 cannot parse its own default --redirects 0.
  [[ $mode == cpu ]] && launcher+=(--redirects 1 --tee 1)
  run_step ddp 150 480 "$details/ddp.jsonl" -- "${launcher[@]}" tests/reference/ddp_bench.py "${runs[@]}" \
    "${ddp_flags[@]}" --scaling "$sizes" --steps 20 --warmup 5 --bucket-cap-mb 25 --out "$details/ddp.jsonl"
}

# `project` of each workload from this OUTDIR's one-GPU records only (the op profiles, the
# one-GPU train records of the scaling runs, the one-rank comm records): the projection the
# measured scaling is checked against. And again with the measured multi-GPU comm records too
# (the link rate measured, not the profile's): how much of a miss is the fabric model.
projections() {
  ((share)) && { skip project "ranks share a GPU: no hardware figures to calibrate from"; return 0; }
  local one_gpu=() f w label
  for f in "$details"/opprof/*.ops.jsonl; do [[ -s $f ]] && one_gpu+=("$f"); done
  for f in "$details"/train/train.*.graphs-on.bucket-25.jsonl; do  # calibrate reads their n = 1 records
    [[ -s $f ]] && one_gpu+=("$f")
  done
  if ((dry_run)); then  # the files part2's scaling runs write
    for w in "${workloads[@]}"; do
      read -r label _ <<<"$w"
      one_gpu+=("$details/opprof/$label.ops.jsonl" "$details/train/train.$label.graphs-on.bucket-25.jsonl")
    done
  fi
  [[ -e ${one_gpu[0]:-} ]] || ((dry_run)) || { skip project "no op profiles in $details/opprof"; return 0; }
  local comm1=$details/project/comm-1gpu.jsonl
  rm -f "$comm1"
  # Only NCCL's records time the GPU's copies and links; MPI's (--cpu) time host memory, which
  # calibrates no GPU (calibration refuses them).
  local gpu_comm=0
  [[ $comm_backend == nccl && -s $details/comm.jsonl ]] && gpu_comm=1
  if ((gpu_comm)); then
    "$python" -c '
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        if line.strip() and json.loads(line).get("world_size") == 1: out.write(line)' "$details/comm.jsonl" "$comm1"
  fi
  local calibrate=("${one_gpu[@]}")
  [[ -s $comm1 ]] && calibrate+=("$comm1")
  local list
  list=$(IFS=,; echo "${calibrate[*]}")
  for w in "${workloads[@]}"; do
    read -r label _ <<<"$w"
    run_step "project.$label" 15 120 "$details/project/$label.jsonl" -- "$bin" project --hardware "$hardware" \
      --config "$details/configs/$label.yaml" --gpus "$sizes" --calibrate "$list" --out "$details/project/$label.jsonl"
    if ((gpu_comm)); then
      run_step "project.$label.fabric" 15 120 "$details/project/$label.fabric.jsonl" -- "$bin" project \
        --hardware "$hardware" --config "$details/configs/$label.yaml" --gpus "$sizes" \
        --calibrate "$list,$details/comm.jsonl" --out "$details/project/$label.fabric.jsonl"
    fi
  done
}

variant_runs() {  # "GRAPHS:BUCKET ...": each workload at 1 and N, 10 measured steps
  local v w label
  for v in $1; do
    for w in "${workloads[@]}"; do
      read -r label _ <<<"$w"
      train "$label" "${v%%:*}" "${v##*:}" "$ends" --steps 10 --warmup 3
    done
  done
}

part1() {
  if [[ $mode == gpu ]]; then build scalebench scalebench_gpu_tests || return 1; else build scalebench || return 1; fi
  machine_records
  mps_start
  if [[ $mode == gpu ]]; then
    local filter=() xml=$details/gtest
    ((share)) && filter=(--gtest_filter='*SharedGpu*')
    mkdir -p "$xml"
    [[ -e $details/done/gpu_tests ]] || rm -f "$xml"/rank*.xml
    # Every rank's results: the test main prints rank 0's only, so each rank writes its own XML
    # (the folder is an argument, never part of the script's text).
    run_step gpu_tests 120 400 - -- "${mpirun[@]}" -np "$N" bash -c \
      'dir=$1; shift; exec "$@" --gtest_output="xml:$dir/rank${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}.xml"' _ \
      "$xml" "$build_dir/tests/scalebench_gpu_tests" "${filter[@]}"
  else
    skip gpu_tests "the GPU test suite needs CUDA (ctest's mpi_tests_np2 and np4 are the CPU ranks' suite)"
  fi
  run_step comm 90 300 "$details/comm.jsonl" -- "${mpirun[@]}" -np "$N" "$bin" comm --op all --backend "$comm_backend" \
    "${share_flag[@]}" --scaling "$sizes" "${comm_sizes[@]}" --out "$details/comm.jsonl"
  mps_stop  # MPS hands one client's fatal GPU fault to every client of the GPU: the faults run time-sliced
  faults
}

# The scaling runs, and after their sweep rank 0 times every op of a step alone (--profile-ops):
# the one-GPU records the projection is calibrated from, made in the same launch.
part2() {
  build scalebench || return 1
  machine_records
  mps_start
  local w label
  for w in "${workloads[@]}"; do
    read -r label _ <<<"$w"
    [[ -e $details/done/train.$label.graphs-on.bucket-25 ]] || ((dry_run)) || rm -f "$details/opprof/$label.ops.jsonl"
    if ((share)); then  # an op profile times one rank alone: not with ranks sharing its GPU
      train "$label" on 25 "$sizes"
    else
      train "$label" on 25 "$sizes" --profile-ops "$details/opprof/$label.ops.jsonl"
    fi
  done
  ddp
  projections  # host-only: what a call has no time left for can be made later from the records
}

part3() {
  build scalebench || return 1
  machine_records
  mps_start
  variant_runs "$variants"
}

finish() {
  mps_stop
  ((dry_run)) && return 0
  "$python" launch/multi_gpu_tables.py "$out" >/dev/null 2>"$details/logs/tables.log" \
    || { echo "multi_gpu_plan.sh: the tables failed:"; cat "$details/logs/tables.log"; }
  tar -czf "$out/details-$part.tar.gz" -C "$out" --exclude details/done details
  if [[ -n $return_dir ]]; then
    cp "$out"/*.md "$out/details-$part.tar.gz" "$return_dir"/
  fi
  echo
  echo "== $part done in $((SECONDS - start)) s; archive $(du -h "$out/details-$part.tar.gz" | cut -f1)"
  [[ -s $out/summary.md ]] && cat "$out/summary.md"
  # Exit 1 when a step of this call failed or timed out (skipped ones do not count).
  ! awk -F'\t' -v p="$part" -v t0="$t0_line" 'NR > t0 && $1 == p && $3 !~ /^(ok|skipped)/ {bad = 1} END {exit !bad}' \
    "$details/steps.tsv" 2>/dev/null
}

touch "$details/steps.tsv"
t0_line=$(wc -l <"$details/steps.tsv")  # this call's steps are the lines after it
what="$N GPU(s)"
[[ $mode == cpu ]] && what="$N CPU ranks"
((share)) && what="$N ranks sharing the GPU(s)"
echo "multi_gpu_plan.sh: $part on $what, world sizes $sizes, into $out"
case $part in
  part1) part1 ;;
  part2) part2 ;;
  part3) part3 ;;
  all) part1; part2; part3 ;;
esac
finish
