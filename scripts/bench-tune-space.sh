#!/usr/bin/env bash
# Measures how long `kharness tune-space --all` takes to list every configuration of a large knob
# space, at two sizes, to show how the listing grows with the number of configurations (it should
# grow linearly: twice the configurations, about twice the time). Builds nothing, needs no GPU.
#
#   scripts/bench-tune-space.sh [KHARNESS_BINARY]      (default: build/kharness)
#
# The space is rmsnorm_h4096's seed and knobs (19 valid THREADS x VEC pairs) with three more
# knobs the seed only names in a comment, so every combination of them is valid:
# 19 x 16 x 8 x C configurations, C = 4 and 8 (9,728 and 19,456).
# On the shared CPU machine: 9,728 configurations in 0.64 s and 19,456 in 1.26 s (1.97x); the
# quadratic search before took 42.6 s for the 9,728.
# Environment: RUNS (default 3, the best is reported), MAX_RATIO (default 3: the larger space may
# take at most this many times the smaller one's time).
# Exit status: 0 when the ratio is within MAX_RATIO, 1 when not, 2 on bad usage or a failing command.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KHARNESS="${1:-$ROOT/build/kharness}"
RUNS="${RUNS:-3}"
MAX_RATIO="${MAX_RATIO:-3}"
OPERATOR_DIR="$ROOT/operators/rmsnorm_h4096"

if [[ ! -x "$KHARNESS" ]]; then
  echo "bench-tune-space: no kharness binary at '$KHARNESS' (build it first, or pass its path)" >&2
  exit 2
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# The seed, with the extra knobs named so that the tune file's check that the seed uses every
# knob passes (their -D definitions change nothing in the kernel).
{ cat "$OPERATOR_DIR/seed.cu"; echo "// Benchmark knobs: BENCH_A BENCH_B BENCH_C"; } >"$WORK/seed.cu"

values() { python3 -c "import json,sys; print(json.dumps(list(range(int(sys.argv[1])))))" "$1"; }
space() {  # space C FILE : the tune file with BENCH_C taking C values
  cat >"$2" <<JSON
{
  "description": "bench-tune-space: a large space over rmsnorm_h4096's seed",
  "knobs": {
    "THREADS": {"values": [64, 128, 256, 512, 1024], "default": 256},
    "VEC": {"values": [1, 2, 4, 8], "default": 8},
    "BENCH_A": {"values": $(values 16), "default": 0},
    "BENCH_B": {"values": $(values 8), "default": 0},
    "BENCH_C": {"values": $(values "$1"), "default": 0}
  },
  "constraints": ["hidden_size % (THREADS * VEC) == 0", "hidden_size / THREADS <= 64"],
  "launches": [{"block": ["THREADS", 1, 1]}]
}
JSON
}

best_seconds() {  # best_seconds TUNE_FILE : sets LINES and BEST (the best of RUNS wall times, s)
  local start end t
  BEST=""
  for ((r = 0; r < RUNS; r++)); do
    start=$(date +%s.%N)
    LINES=$("$KHARNESS" tune-space rmsnorm_h4096 --seed-file "$WORK/seed.cu" --tune-file "$1" \
      --all --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)['sample']))") ||
      { echo "bench-tune-space: tune-space failed on $1" >&2; exit 2; }
    end=$(date +%s.%N)
    t=$(echo "$end - $start" | bc -l)
    if [[ -z "$BEST" ]] || (($(echo "$t < $BEST" | bc -l))); then BEST=$t; fi
  done
}

space 4 "$WORK/small.json"
space 8 "$WORK/large.json"
best_seconds "$WORK/small.json"
small_n=$LINES small_s=$BEST
best_seconds "$WORK/large.json"
large_n=$LINES large_s=$BEST
ratio=$(echo "$large_s / $small_s" | bc -l)
printf 'tune-space --all: %6d configurations in %7.3f s\n' "$small_n" "$small_s"
printf 'tune-space --all: %6d configurations in %7.3f s (%.2fx the time for %.2fx the configurations)\n' \
  "$large_n" "$large_s" "$ratio" "$(echo "$large_n / $small_n" | bc -l)"
if (($(echo "$ratio > $MAX_RATIO" | bc -l))); then
  echo "bench-tune-space: the listing grows faster than linearly (ratio over $MAX_RATIO)" >&2
  exit 1
fi
