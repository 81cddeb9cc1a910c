#!/usr/bin/env bash
# First steps with kharness: build it, check the machine, then either run a short optimisation
# of the gemm_n6144_k4096 GEMM with the offline tune generator (when a GPU is present) or show
# what works
# without one: compiling every shipped operator's reference, seed and baseline, cross-compiling
# the rmsnorm seed for Blackwell, and the optimisation loop of gemm_fp8 with compile verdicts only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KHARNESS="$ROOT/build/kharness"

# The binary alone: the tests are scripts/test.sh's to build.
BUILD_TARGETS=kharness "$ROOT/scripts/setup.sh"

echo
echo "+ kharness doctor"
# doctor exits 3 when there is no GPU; that is expected on a build machine.
"$KHARNESS" doctor || echo "(doctor exited with status $?)"

have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  have_gpu=1
fi

echo
if [[ $have_gpu == 1 ]]; then
  # A real optimisation run with the built-in offline generator (no model, no network): the GEMM
  # seed for this GPU (on sm_90a the TMA + wgmma seed, seed.sm_90a.cu) and its tile, pipeline and
  # block-order knobs searched through the whole pipeline (on an H200 a 50-candidate run took
  # 149 s; its best ran at 0.71x cuBLASLt at M >= 256), the best kernel written to best-gemm.cu,
  # every candidate archived under ./.kharness (`kharness report --all --html report.html`).
  echo "+ kharness run --operator gemm_n6144_k4096 --budget 20 --provider tune --out best-gemm.cu"
  exec "$KHARNESS" run --operator gemm_n6144_k4096 --budget 20 --provider tune --out best-gemm.cu
fi

echo "No GPU is present on this machine, so nothing can run or be timed here."
echo "What works without one: compiling (NVRTC needs no GPU), the rules, and the optimisation"
echo "loop with compile verdicts only."
echo
echo "+ kharness operators check"
"$KHARNESS" operators check
echo
echo "+ kharness compile operators/rmsnorm_h4096/seed.cu --operator rmsnorm_h4096 --arch sm_100a"
"$KHARNESS" compile operators/rmsnorm_h4096/seed.cu --operator rmsnorm_h4096 --arch sm_100a
echo
echo "+ kharness run --operator gemm_fp8 --budget 8 --provider tune --compile-only --no-archive"
"$KHARNESS" run --operator gemm_fp8 --budget 8 --provider tune --compile-only --no-archive \
  --run-dir "$(mktemp -d)"
