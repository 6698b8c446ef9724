#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages.
# Idempotent: prints nothing and touches nothing when all are present.
set -euo pipefail
PACKAGES=(
  build-essential cmake g++ git pkg-config
  libdnnl-dev            # oneDNN: matrix products (AMX bf16)
  ocl-icd-opencl-dev     # oneDNN's CMake config looks for OpenCL (only Recommended by libdnnl-dev)
  libomp-dev             # OpenMP runtime headers (GCC uses libgomp)
  clang libclang-rt-14-dev  # libFuzzer and its sanitizers (scripts/fuzz.sh)
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  libcli11-dev
  nlohmann-json3-dev
  openmpi-bin libopenmpi-dev  # data-parallel training (mpirun; optional in the build)
  qemu-user              # tests on an emulated AVX2-only CPU (qemu-x86_64 -cpu Haswell)
  zlib1g-dev             # unpacking the R data of the default corpus
  libicu-dev             # Unicode classes and NFD for `mantissa tokenize`
  python3 python3-venv python3-pip
  python3-torch          # the Python package's mantissa.torch tests (seen from the venv: scripts/pyenv.sh)
  ca-certificates
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
