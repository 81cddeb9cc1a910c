#!/usr/bin/env bash
# Measures how long `kharness compile` takes as a whole process, cold (no cache) and on a cache
# hit, next to nvcc compiling the same seed to a cubin. Builds nothing.
#
#   scripts/bench-compile.sh [KHARNESS_BINARY]      (default: build/kharness)
#
# Environment: RUNS (default 20), ARCH (default sm_90a), COLD_TARGET_S (0.5), HIT_TARGET_S (0.05).
# Exit status: 0 when both targets are met, 1 when one is missed, 2 on bad usage or a failing
# command.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

KHARNESS="${1:-build/kharness}"
RUNS="${RUNS:-20}"
ARCH="${ARCH:-sm_90a}"
COLD_TARGET_S="${COLD_TARGET_S:-0.5}"
HIT_TARGET_S="${HIT_TARGET_S:-0.05}"
SEED="operators/rmsnorm_h4096/seed.cu"
OPERATOR="rmsnorm_h4096"

if [[ ! -x "$KHARNESS" ]]; then
  echo "bench-compile: no kharness binary at '$KHARNESS' (build it first, or pass its path)" >&2
  exit 2
fi
KHARNESS="$(cd "$(dirname "$KHARNESS")" && pwd)/$(basename "$KHARNESS")"

NVCC="${NVCC:-}"
if [[ -z "$NVCC" ]]; then
  if command -v nvcc >/dev/null 2>&1; then NVCC="$(command -v nvcc)";
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then NVCC=/usr/local/cuda/bin/nvcc; fi
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/kharness-bench.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
export KHARNESS_CACHE="$TMP/cache"
mkdir -p "$KHARNESS_CACHE"
cp "$SEED" "$TMP/seed_standalone.cu"  # the plan is a comment, so nvcc compiles it as it is

COLD_CMD="'$KHARNESS' compile '$SEED' --operator $OPERATOR --arch $ARCH --no-cache --out '$TMP/out-cold'"
HIT_CMD="'$KHARNESS' compile '$SEED' --operator $OPERATOR --arch $ARCH --out '$TMP/out-hit'"
NVCC_CMD="'$NVCC' -cubin -arch=$ARCH -o '$TMP/seed.cubin' '$TMP/seed_standalone.cu'"

# Each command must work before it is timed.
for cmd in "$COLD_CMD" "$HIT_CMD"; do
  if ! eval "$cmd" >"$TMP/check.log" 2>&1; then
    echo "bench-compile: this command failed:" >&2
    echo "  $cmd" >&2
    sed 's/^/  | /' "$TMP/check.log" | tail -n 30 >&2
    exit 2
  fi
done
HAVE_NVCC=0
if [[ -n "$NVCC" ]] && eval "$NVCC_CMD" >"$TMP/check.log" 2>&1; then HAVE_NVCC=1; fi

# median_seconds CMD -> prints the median wall time of RUNS runs, in seconds.
median_seconds() {
  local cmd="$1"
  if command -v hyperfine >/dev/null 2>&1; then
    hyperfine --style none --warmup 2 --runs "$RUNS" --export-json "$TMP/h.json" "$cmd" \
      >/dev/null 2>&1 || return 1
    python3 -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["results"][0]["median"])' \
      "$TMP/h.json"
    return
  fi
  local times=() i start end
  eval "$cmd" >/dev/null 2>&1  # warm-up (file cache, driver)
  for ((i = 0; i < RUNS; i++)); do
    start=$(date +%s%N)
    eval "$cmd" >/dev/null 2>&1 || return 1
    end=$(date +%s%N)
    times+=($((end - start)))
  done
  printf '%s\n' "${times[@]}" | sort -n |
    awk '{ t[NR] = $1 } END { m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2;
                              printf "%.4f\n", m / 1e9 }'
}

echo "bench-compile: $RUNS runs each, arch $ARCH, $(command -v hyperfine >/dev/null && echo hyperfine || echo 'bash loop')"
COLD=$(median_seconds "$COLD_CMD") || { echo "bench-compile: cold compile failed" >&2; exit 2; }
eval "$HIT_CMD" >/dev/null 2>&1  # make sure the cache holds the entry
HIT=$(median_seconds "$HIT_CMD") || { echo "bench-compile: cached compile failed" >&2; exit 2; }
if [[ $HAVE_NVCC == 1 ]]; then
  NVCC_S=$(median_seconds "$NVCC_CMD") || NVCC_S=""
else
  NVCC_S=""
fi

verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v <= t) ? "PASS" : "FAIL" }'; }
COLD_V=$(verdict "$COLD" "$COLD_TARGET_S")
HIT_V=$(verdict "$HIT" "$HIT_TARGET_S")
if [[ -n "$NVCC_S" ]]; then
  RATIO=$(awk -v n="$NVCC_S" -v c="$COLD" 'BEGIN { printf "%.1fx", (c > 0) ? n / c : 0 }')
else
  NVCC_S="n/a"; RATIO="n/a"
fi

printf '\n%-24s %10s %10s %s\n' "measure" "median s" "target s" "result"
printf '%-24s %10s %10s %s\n' "kharness cold (no cache)" "$COLD" "$COLD_TARGET_S" "$COLD_V"
printf '%-24s %10s %10s %s\n' "kharness cache hit" "$HIT" "$HIT_TARGET_S" "$HIT_V"
printf '%-24s %10s %10s %s\n' "nvcc -cubin" "$NVCC_S" "-" "-"
printf '%-24s %10s\n' "ratio nvcc/cold" "$RATIO"

# One machine-readable line for scripts/device-test.sh.
echo "BENCH cold=$COLD hit=$HIT nvcc=$NVCC_S ratio=$RATIO cold_result=$COLD_V hit_result=$HIT_V"
[[ $COLD_V == PASS && $HIT_V == PASS ]]
