#!/usr/bin/env bash
# Installs the Debian 12 packages dtrain needs, only those missing (apt-get needs root or sudo).
# Used by both README commands. Includes the packages of the local-Slurm test (tests/cli/test_slurm.sh:
# slurmctld slurmd slurm-client munge; installing them starts no daemon); DTRAIN_WITH_SLURM=0 leaves them out.
# strace: the no-data-files check of tests/cli/test_synthetic.sh. clang-format: tests/style_check.sh.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libopenmpi-dev openmpi-bin libhdf5-openmpi-dev
      libboost-program-options-dev libboost-dev libprotobuf-dev protobuf-compiler libdnnl-dev ocl-icd-opencl-dev libopenblas-dev libgtest-dev
      nlohmann-json3-dev
      libjpeg62-turbo-dev libpng-dev
      dataset-fashion-mnist python3 python3-h5py python3-numpy python3-matplotlib python3-pil
      strace clang-format)
if [ "${DTRAIN_WITH_SLURM:-1}" = 1 ]; then pkgs+=(slurmctld slurmd slurm-client munge); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "dtrain: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "dtrain: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
