#!/usr/bin/env bash
# Installs what kharness needs to build (distribution packages only), checks for the CUDA
# toolkit, and builds build/kharness (Release; Ninja when available). Safe to run again: it
# installs only missing packages and rebuilds only what changed.
#
#   scripts/setup.sh            BUILD_DIR (default build) and BUILD_TYPE (default Release) may be set;
#                               BUILD_TARGETS="kharness" builds the binary alone (the quick start).
#   SETUP_FUZZ=1 scripts/setup.sh   also installs what scripts/fuzz.sh needs (clang's libFuzzer).
#   SETUP_BROWSER=1 scripts/setup.sh  also installs Chromium, for the HTML report's browser test
#                                     (tests/html_browser.sh; it skips without it).
#   SETUP_CUTLASS=1 scripts/setup.sh  also fetches the CUTLASS headers for CuTe solutions (the
#                                     nvidia-cutlass wheel, with pip, into .cutlass: see
#                                     scripts/fetch-cutlass.sh); never done at build time.
#   SETUP_SLURM=1 scripts/setup.sh  also installs Slurm and munge, for the Slurm launcher's test
#                                   (tests/slurm/run-slurm-test.sh, CTest label slurm).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
BUILD_TYPE="${BUILD_TYPE:-Release}"
PACKAGES=(build-essential cmake ninja-build libcli11-dev nlohmann-json3-dev libspdlog-dev
          libfmt-dev libgtest-dev libcurl4-openssl-dev libsqlite3-dev git
          libxml2-utils python3-jsonschema  # schema checks of JUnit and JSON reports
          clang-format clang-tidy)          # the lint step (scripts/lint.sh)
# The fuzz step only (scripts/fuzz.sh): clang with libFuzzer and the sanitizer run-times.
if [[ "${SETUP_FUZZ:-0}" == 1 ]]; then PACKAGES+=(clang libclang-rt-14-dev); fi
# The browser test only (tests/html_browser.sh): headless Chromium renders the HTML report.
if [[ "${SETUP_BROWSER:-0}" == 1 ]]; then PACKAGES+=(chromium); fi
# The Slurm test only: a one-node cluster on localhost (slurmctld, slurmd, munged).
if [[ "${SETUP_SLURM:-0}" == 1 ]]; then PACKAGES+=(slurm-wlm munge); fi

say() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

# 1. Packages (Debian/Ubuntu), only those missing. A tool already on PATH (a newer CMake, a
#    compiler installed another way) counts as present; so does a library whose -dev package is
#    installed. When installing is impossible (no root, no network) this warns and goes on: the
#    configure step below then names whatever is really missing.
has_package() {
  case "$1" in
    build-essential) command -v c++ >/dev/null 2>&1 && command -v make >/dev/null 2>&1 && return 0 ;;
    cmake) command -v cmake >/dev/null 2>&1 && return 0 ;;
    ninja-build) command -v ninja >/dev/null 2>&1 && return 0 ;;
    git) command -v git >/dev/null 2>&1 && return 0 ;;
    chromium) command -v chromium >/dev/null 2>&1 && return 0 ;;
  esac
  command -v dpkg-query >/dev/null 2>&1 || return 0  # not Debian-like: assume present
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}
missing=()
for p in "${PACKAGES[@]}"; do has_package "$p" || missing+=("$p"); done
if ((${#missing[@]})); then
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=(sudo -n);
    else SUDO=(none); fi
  fi
  if [[ "${SUDO[*]}" == none ]] || ! command -v apt-get >/dev/null 2>&1; then
    say "warning: missing packages: ${missing[*]} (install them as root: apt-get install ${missing[*]})"
  else
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! { "${SUDO[@]}" apt-get update -qq &&
           "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
      say "warning: could not install ${missing[*]}; trying to build with what is here"
    fi
  fi
fi

# 2. The CUDA toolkit (nvcc, NVRTC, CUPTI headers).
NVCC="$(command -v nvcc || true)"
if [[ -z "$NVCC" ]]; then
  for dir in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
    if [[ -n "$dir" && -x "$dir/bin/nvcc" ]]; then NVCC="$dir/bin/nvcc"; break; fi
  done
fi
[[ -n "$NVCC" ]] || die "no CUDA toolkit found (nvcc not on PATH, not in \$CUDA_HOME or /usr/local/cuda).
  Install the CUDA toolkit 12.x or 13.x (it provides NVRTC and CUPTI) and put its bin/ on PATH,
  or set CUDA_HOME to its folder."
CUDA_ROOT="$(cd "$(dirname "$NVCC")/.." && pwd)"
[[ -f "$CUDA_ROOT/include/nvrtc.h" ]] || die "the CUDA toolkit at $CUDA_ROOT has no include/nvrtc.h"
say "CUDA toolkit: $CUDA_ROOT ($("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"

# 3. Configure (once) and build.
GENERATOR=()
if command -v ninja >/dev/null 2>&1; then GENERATOR=(-G Ninja); fi
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  say "configuring $BUILD_DIR ($BUILD_TYPE)"
  cmake -S "$ROOT" -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DCUDAToolkit_ROOT="$CUDA_ROOT" >/dev/null
fi
# BUILD_TARGETS (space-separated) builds only those: the quick start builds the binary alone,
# not the tests it does not run (about half of the objects).
TARGETS=()
for t in ${BUILD_TARGETS:-}; do TARGETS+=(--target "$t"); done
say "building $BUILD_DIR${BUILD_TARGETS:+ (${BUILD_TARGETS})}"
cmake --build "$BUILD_DIR" --parallel "${JOBS:-$(nproc 2>/dev/null || echo 2)}" "${TARGETS[@]}"
if [[ "${SETUP_CUTLASS:-0}" == 1 ]]; then
  if "$ROOT/scripts/fetch-cutlass.sh" "$ROOT/.cutlass"; then
    say "CuTe/CUTLASS headers: export KHARNESS_CUTLASS=$ROOT/.cutlass/include"
  else
    say "warning: no CUTLASS headers fetched; CuTe solutions need --cutlass DIR or KHARNESS_CUTLASS"
  fi
fi
say "done: $BUILD_DIR/kharness"
