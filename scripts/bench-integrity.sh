#!/usr/bin/env bash
# The cost of timing integrity (docs/correctness.md#checked-iterations): `kharness validate` of shipped seeds, whole-process wall
# time and the seeds' reported latencies, RUNS times each in separate processes with private
# archives (no verdict cache). With BEFORE=FILE (a JSON this script wrote with another build) it
# prints the ratios: wall after/before (target <= 1.25) and each workload's latency after/before
# (target: within 1%). Writes JSON=FILE (default $OUT/bench-integrity.json or a temp file).
#
#   scripts/bench-integrity.sh [KHARNESS_BINARY]   CASES ("OP=SOLUTION ..."; default the rmsnorm
#                                                  and gemm_fp8 seeds), RUNS (default 3),
#                                                  BEFORE, JSON, SEED (default 1), EXTRA
#                                                  (more validate flags, e.g. --state-reset reload)
# scripts/data/bench-integrity-before.json holds the figures of main at ed9a348, before timed iterations were checked (H200,
# driver 580.159.04): BEFORE=scripts/data/bench-integrity-before.json compares with them.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KHARNESS="${1:-build/kharness}"
CASES="${CASES:-rmsnorm_h4096=operators/rmsnorm_h4096/seed.cu gemm_fp8=operators/_families/gemm_fp8/seed.cu}"
RUNS="${RUNS:-3}"
SEED="${SEED:-1}"
[[ -x "$KHARNESS" ]] || { echo "bench-integrity: no kharness binary at '$KHARNESS'" >&2; exit 2; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
JSON="${JSON:-${OUT:+$OUT/bench-integrity.json}}"
JSON="${JSON:-$TMP/bench-integrity.json}"
rc=0
for case in $CASES; do
  op="${case%%=*}"
  solution="${case#*=}"
  [[ -e "$solution" ]] || { echo "bench-integrity: no solution at '$solution'" >&2; exit 2; }
  for i in $(seq 1 "$RUNS"); do
    start=$(date +%s.%N)
    KHARNESS_ARCHIVE="$TMP/archive-$op-$i" "$KHARNESS" validate "$solution" --operator "$op" \
      --seed "$SEED" ${EXTRA:-} --json >"$TMP/$op-$i.json" 2>"$TMP/$op-$i.err"
    code=$?
    end=$(date +%s.%N)
    echo "$op $i $code $(python3 -c "print($end - $start)")" >>"$TMP/walls.txt"
    if ((code != 0)); then
      echo "bench-integrity: $op run $i exited $code"; tail -c 1500 "$TMP/$op-$i.err"; rc=1
    fi
  done
done
python3 - "$TMP" "$JSON" "${BEFORE:-}" <<'PY' || rc=1
import json, os, statistics, sys
tmp, out, before_path = sys.argv[1], sys.argv[2], sys.argv[3]
walls = {}
for line in open(os.path.join(tmp, "walls.txt")):
    op, i, code, wall = line.split()
    walls.setdefault(op, []).append((int(i), int(code), float(wall)))
result = {}
for op, runs in walls.items():
    lat = {}
    for i, code, _ in runs:
        try:
            v = json.load(open(os.path.join(tmp, f"{op}-{i}.json")))
        except Exception:
            continue
        v = v[0] if isinstance(v, list) else v
        for w in v.get("workloads", []):
            c = w.get("timing", {}).get("candidate", {})
            if isinstance(c.get("latency"), (int, float)):
                lat.setdefault(w["uuid"], []).append(c["latency"])
    result[op] = {"walls": [w for _, _, w in runs], "codes": [c for _, c, _ in runs],
                  "latency": {u: statistics.median(xs) for u, xs in lat.items()}}
json.dump(result, open(out, "w"), indent=1)
before = json.load(open(before_path)) if before_path else {}
print("bench-integrity: validate of the seeds, wall time of the whole process and seed latencies")
print(f"{'operator':16s} {'runs':>4s} {'wall s (median)':>16s} {'min-max':>13s} {'wl':>3s} "
      f"{'mean lat us':>11s} {'wall x before':>13s} {'lat x before (mean, worst)':>27s}")
bad = 0
for op, r in result.items():
    ws = r["walls"]
    lats = list(r["latency"].values())
    mean_lat = statistics.fmean(lats) * 1e6 if lats else float("nan")
    wall_ratio, lat_cell = "-", "-"
    b = before.get(op)
    if b:
        wall_ratio = statistics.median(ws) / statistics.median(b["walls"])
        ratios = [r["latency"][u] / b["latency"][u] for u in r["latency"] if u in b["latency"]]
        if ratios:
            worst = max(ratios, key=lambda x: abs(x - 1))
            lat_cell = f"{statistics.fmean(ratios):.4f}, {worst:.4f}"
        bad += wall_ratio > 1.25
        wall_ratio = f"{wall_ratio:.3f}"
    print(f"{op:16s} {len(ws):4d} {statistics.median(ws):16.2f} {min(ws):6.2f}-{max(ws):6.2f} "
          f"{len(lats):3d} {mean_lat:11.2f} {wall_ratio:>13s} {lat_cell:>27s}")
print(f"BENCH integrity cases={len(result)} over_wall_target={bad}")
PY
exit $rc
