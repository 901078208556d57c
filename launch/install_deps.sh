#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages scalebench builds with, when they are missing.
# The CUDA toolkit (nvcc, cuBLAS, NCCL) is not a Debian package here: when it is under
# /usr/local/cuda the build picks it up, otherwise scalebench builds CPU-only.
set -euo pipefail
packages=(build-essential cmake git pkg-config openmpi-bin libopenmpi-dev libyaml-cpp-dev libgtest-dev
          libcli11-dev nlohmann-json3-dev libfmt-dev python3-matplotlib
          clang libclang-rt-dev)  # clang + libFuzzer/ASan runtimes: tests/fuzz
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [[ $EUID -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
