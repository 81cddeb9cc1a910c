#!/usr/bin/env bash
# Whole-process time of `kharness check` of the rmsnorm seed over all its workloads, 3 trials
# (target: <= 3 s on an H200), and where the time goes (compile, worker, trials).
#
#   scripts/bench-check.sh [KHARNESS_BINARY]     RUNS (default 5), TARGET_S (default 3)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KHARNESS="${1:-build/kharness}"
RUNS="${RUNS:-5}"
TARGET_S="${TARGET_S:-3}"
[[ -x "$KHARNESS" ]] || { echo "bench-check: no kharness binary at '$KHARNESS'" >&2; exit 2; }
# A private archive: the verdict cache must not answer what is being timed.
export KHARNESS_ARCHIVE="$(mktemp -d)"
TMP="$(mktemp -d)"
trap 'rm -rf "$KHARNESS_ARCHIVE" "$TMP"' EXIT

walls=()
for i in $(seq 1 "$RUNS"); do
  start=$(date +%s%N)
  "$KHARNESS" check operators/rmsnorm_h4096/seed.cu --operator rmsnorm_h4096 --trials 3 --seed "$i" --json \
    >"$TMP/run$i.json" 2>"$TMP/run$i.err"
  rc=$?
  end=$(date +%s%N)
  if ((rc != 0)); then
    echo "bench-check: run $i exited $rc"; head -c 2000 "$TMP/run$i.json" "$TMP/run$i.err"; exit 1
  fi
  walls+=("$(( (end - start) / 1000000 ))")
done
median_ms=$(printf '%s\n' "${walls[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
python3 - "$TMP/run1.json" "$median_ms" "$TARGET_S" <<'PY'
import json, sys
v = json.load(open(sys.argv[1])); median = int(sys.argv[2]) / 1000; target = float(sys.argv[3])
trials = [t["seconds"] for w in v["workloads"] for t in w["trials"]]
print(f"bench-check: {len(v['workloads'])} workloads x 3 trials, status {v['status']}")
print(f"{'measure':34s} {'seconds':>8s}")
print(f"{'whole process (median)':34s} {median:8.3f}   target {target} {'PASS' if median <= target else 'FAIL'}")
print(f"{'  compile (parent, cache)':34s} {v['compile']['seconds']:8.3f}")
print(f"{'  worker process':34s} {v['seconds']:8.3f}")
print(f"{'    trials (sum)':34s} {sum(trials):8.3f}")
big = max(v["workloads"], key=lambda w: sum(t["seconds"] for t in w["trials"]))
print(f"{'    slowest workload ' + json.dumps(big['axes']):34s} {sum(t['seconds'] for t in big['trials']):8.3f}")
print(f"BENCH check_median={median:.3f} worker={v['seconds']:.3f} trials={sum(trials):.3f} result={'PASS' if median <= target else 'FAIL'}")
PY
