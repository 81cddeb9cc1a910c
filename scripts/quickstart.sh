#!/usr/bin/env bash
# First steps with kharness: build it, check the machine, then either run a short optimisation
# of rmsnorm_h4096 (when a GPU is present) or show what works without one: compiling every
# shipped operator's reference, seed and baseline, and cross-compiling the seed for Blackwell.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KHARNESS="$ROOT/build/kharness"

"$ROOT/scripts/setup.sh"

echo
echo "+ kharness doctor"
# doctor exits 3 when there is no GPU; that is expected on a build machine.
"$KHARNESS" doctor || echo "(doctor exited with status $?)"

have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  have_gpu=1
fi
# `run` is there when its own help works and shows --budget (CLI parsers may answer a --help
# after an unknown command with the top-level help and status 0).
have_run=0
if run_help="$("$KHARNESS" run --help 2>&1)" && grep -q -- '--budget' <<<"$run_help"; then
  have_run=1
fi

echo
if [[ $have_gpu == 1 && $have_run == 1 ]]; then
  echo "+ kharness run --operator rmsnorm_h4096 --budget 20"
  exec "$KHARNESS" run --operator rmsnorm_h4096 --budget 20
fi

if [[ $have_gpu == 0 ]]; then
  echo "No GPU is present on this machine, so nothing can run or be timed here."
  echo "What works without one: compiling (NVRTC needs no GPU) and checking the rules."
else
  echo "This kharness build has no 'run' command yet, so no optimisation run is started;"
  echo "instead: the whole pipeline on the rmsnorm seed (compile, check, time against the baseline)."
  echo
  echo "+ kharness validate operators/rmsnorm_h4096/seed.cu --operator rmsnorm_h4096"
  "$KHARNESS" validate operators/rmsnorm_h4096/seed.cu --operator rmsnorm_h4096
fi
echo
echo "+ kharness operators check"
"$KHARNESS" operators check
echo
echo "+ kharness compile operators/rmsnorm_h4096/seed.cu --operator rmsnorm_h4096 --arch sm_100a"
"$KHARNESS" compile operators/rmsnorm_h4096/seed.cu --operator rmsnorm_h4096 --arch sm_100a
