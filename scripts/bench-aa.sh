#!/usr/bin/env bash
# A/A calibration of the comparison `kharness run` promotes by: `kharness bench`
# of a solution against itself as the baseline, in RUNS separate processes. Each run's score (the
# mean speedup over the workloads) should be 1; how far it strays is the harness's own error
# between two timings of one kernel, which the median's noise does not see (separate buffers,
# separate modules). Target: every run's score within --min-gain's default (2%) of 1.
#
#   scripts/bench-aa.sh [KHARNESS_BINARY]   SOLUTION (default operators/rmsnorm_h4096/seed.cu),
#                                           OPERATOR (default rmsnorm_h4096), RUNS (default 3),
#                                           MIN_GAIN (default 0.02)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KHARNESS="${1:-build/kharness}"
SOLUTION="${SOLUTION:-operators/rmsnorm_h4096/seed.cu}"
OPERATOR="${OPERATOR:-rmsnorm_h4096}"
RUNS="${RUNS:-3}"
MIN_GAIN="${MIN_GAIN:-0.02}"
[[ -x "$KHARNESS" ]] || { echo "bench-aa: no kharness binary at '$KHARNESS'" >&2; exit 2; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
for i in $(seq 1 "$RUNS"); do
  # A private archive per run: the verdict cache must not answer the second timing.
  KHARNESS_ARCHIVE="$TMP/archive$i" "$KHARNESS" bench "$SOLUTION" --operator "$OPERATOR" \
    --baseline "$SOLUTION" --seed "$i" --json >"$TMP/run$i.json" 2>"$TMP/run$i.err"
  rc=$?
  if ((rc != 0)); then
    echo "bench-aa: run $i exited $rc"; tail -c 1500 "$TMP/run$i.err"; exit 1
  fi
done
python3 - "$TMP" "$RUNS" "$MIN_GAIN" "$SOLUTION" <<'PY'
import json, os, statistics, sys
tmp, runs, min_gain, solution = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
print(f"bench-aa: {solution} against itself, {runs} processes")
print(f"{'run':>4s} {'score':>8s} {'worst workload':>15s} {'mean noise':>11s}  within {100 * min_gain:g}%")
bad = 0
for i in range(1, runs + 1):
    v = json.load(open(os.path.join(tmp, f"run{i}.json")))
    if isinstance(v, list):  # one verdict per solution
        v = v[0]
    ratios, noises = [], []
    for w in v["workloads"]:
        t = w.get("timing", {})
        if isinstance(t.get("speedup"), (int, float)):
            ratios.append(t["speedup"])
            noises.append((t.get("candidate", {}).get("noise") or 0) ** 2 + (t.get("baseline", {}).get("noise") or 0) ** 2)
    if not ratios:
        print(f"{i:4d} no timed workloads"); bad += 1; continue
    score = statistics.fmean(ratios)
    worst = max(ratios, key=lambda r: abs(r - 1))
    noise = statistics.fmean(n ** 0.5 for n in noises)
    ok = abs(score - 1) <= min_gain
    bad += not ok
    print(f"{i:4d} {score:8.4f} {worst:15.4f} {100 * noise:10.2f}%  {'ok' if ok else 'OFF'}")
print(f"BENCH aa_runs={runs} aa_off={bad}")
raise SystemExit(1 if bad else 0)
PY
