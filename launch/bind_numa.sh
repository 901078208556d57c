#!/usr/bin/env bash
# Runs one rank bound to the NUMA node of its GPU: `bind_numa.sh PROGRAM ARGS...`.
# scalebench gives local rank i GPU i (of CUDA_VISIBLE_DEVICES when set); this wrapper
# asks nvidia-smi for that GPU's closest NUMA node (`topo -C`; else the PCI device's node
# in sysfs), and execs the program under
# `numactl --cpunodebind=N --preferred=N`, so the rank's host threads and pinned staging
# buffers sit next to the PCIe root of its GPU. Preferred, not strict, memory policy: a
# rank never fails for want of memory on its own node. Where the node cannot be found
# (no numactl, no nvidia-smi, no NUMA, a GPU without a node) it runs the program unbound;
# local rank 0 says so once.
set -euo pipefail

local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-${MPI_LOCALRANKID:-${PMI_LOCAL_RANK:-0}}}}

say_once() { [[ $local_rank == 0 ]] && echo "bind_numa.sh: $*" >&2; return 0; }

numa_node_of_gpu() {
  command -v numactl >/dev/null 2>&1 || { echo "numactl not found"; return 1; }
  command -v nvidia-smi >/dev/null 2>&1 || { echo "nvidia-smi not found"; return 1; }
  local gpu=$local_rank
  if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    IFS=, read -r -a visible <<<"$CUDA_VISIBLE_DEVICES"
    ((local_rank < ${#visible[@]})) || { echo "local rank $local_rank has no GPU in CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; return 1; }
    gpu=${visible[$local_rank]}
  fi
  # nvidia-smi's own answer first; it knows GPUs whose PCI device reports no node (VMs).
  local node
  node=$(nvidia-smi topo -C -i "$gpu" 2>/dev/null | sed -n 's/^NUMA IDs of closest CPU: *\([0-9][0-9]*\) *$/\1/p')
  if [[ -n $node ]]; then echo "$node"; return 0; fi
  local bus
  bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i "$gpu" 2>/dev/null) || { echo "nvidia-smi cannot see GPU $gpu"; return 1; }
  # nvidia-smi writes an 8-digit PCI domain ("00000000:17:00.0"); sysfs uses 4 ("0000:17:00.0").
  bus=$(echo "$bus" | tr 'A-F' 'a-f' | tr -d ' ')
  bus=${bus: -12}
  local node_file=/sys/bus/pci/devices/$bus/numa_node
  [[ -r $node_file ]] || { echo "no $node_file"; return 1; }
  node=$(<"$node_file")
  ((node >= 0)) || { echo "GPU $gpu ($bus) reports no NUMA node"; return 1; }
  echo "$node"
}

if node=$(numa_node_of_gpu); then
  [[ -n ${SCALEBENCH_BIND_VERBOSE:-} ]] && echo "bind_numa.sh: local rank $local_rank -> NUMA node $node" >&2
  exec numactl --cpunodebind="$node" --preferred="$node" "$@"
fi
say_once "no NUMA binding ($node); running unbound"
exec "$@"
