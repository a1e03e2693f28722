#!/usr/bin/env bash
# Installs the Debian packages Theseus needs to build and test, and only those
# that are missing. Safe to run repeatedly; does nothing when all are present.
#   scripts/setup-deps.sh        what `make`, `make test` need
#   scripts/setup-deps.sh fuzz   also clang and libFuzzer (make fuzz)
set -euo pipefail

# package -> why we need it
required=(
  cmake            # the build
  g++              # C++20 compiler
  make
  pkg-config
  nlohmann-json3-dev   # JSON schedules, policies, attributes
  libtinyxml2-dev      # MSCCL XML import
  libhwloc-dev         # host topology (GPUs, NICs, NUMA nodes) for NIC choice
  libibverbs-dev       # the IB network's verbs headers (libibverbs itself is loaded at run time, if there)
  libgtest-dev         # unit and multi-process tests
  libgmock-dev
  libbenchmark-dev     # micro-benchmarks
  openmpi-bin          # peer library for side-by-side benchmarks, mpirun
  libopenmpi-dev
  iproute2             # network namespaces for multi-host tests
  gnuplot-nox          # benchmark plots
  python3-prometheus-client  # the metrics test parses the endpoint with Prometheus' own parser
  python3-jsonschema   # the schema tests (schedules, policies, merged traces)
  procps
)

# make fuzz: clang with libFuzzer and the sanitizer runtimes (Debian 12: libclang-rt-dev ships
# libclang_rt.fuzzer*.a and the ASan/UBSan runtimes for the default clang), llvm-symbolizer for stacks.
if [[ ${1:-} == fuzz ]]; then
  required+=(clang libclang-rt-dev llvm)
fi

missing=()
for p in "${required[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "theseus: missing Debian packages: ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "theseus: not root and no password-less sudo; install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; then
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
