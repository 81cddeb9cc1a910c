#!/usr/bin/env bash
# The verdict-speed benchmark: whole-process wall time of `kharness validate` of the
# rmsnorm seed over every rmsnorm_h4096 workload (checked, then timed against the baseline),
# caches off (--no-cache: no verdict cache, a private compile cache), the median of RUNS whole
# processes (default 5; target <= TARGET_S, default 2.0 s), and where the time goes: the
# parent's compile, the worker process, and the timed phase per workload.
#
#   scripts/bench-validate.sh [KHARNESS_BINARY]     (default build/kharness; run from anywhere)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KHARNESS="${1:-build/kharness}"
RUNS="${RUNS:-5}"
TARGET_S="${TARGET_S:-2.0}"
OP="${OP:-rmsnorm_h4096}"
[[ -x "$KHARNESS" ]] || { echo "bench-validate: no kharness binary at '$KHARNESS'" >&2; exit 2; }
export KHARNESS_ARCHIVE="$(mktemp -d)"  # never answered from an earlier verdict
TMP="$(mktemp -d)"
trap 'rm -rf "$KHARNESS_ARCHIVE" "$TMP"' EXIT

walls=()
for i in $(seq 1 "$RUNS"); do
  start=$(date +%s%N)
  "$KHARNESS" validate "operators/$OP/seed.cu" --operator "$OP" --no-cache --seed "$i" --json \
    >"$TMP/run$i.json" 2>"$TMP/run$i.err"
  rc=$?
  end=$(date +%s%N)
  if ((rc != 0)); then
    echo "bench-validate: run $i exited $rc"; head -c 2000 "$TMP/run$i.json" "$TMP/run$i.err"
    exit 1
  fi
  walls+=("$(((end - start) / 1000000))")
done
median_ms=$(printf '%s\n' "${walls[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
python3 - "$TMP/run1.json" "$median_ms" "$TARGET_S" "${walls[*]}" <<'PY'
import json, sys
v = json.load(open(sys.argv[1])); median = int(sys.argv[2]) / 1000; target = float(sys.argv[3])
walls = [int(x) / 1000 for x in sys.argv[4].split()]
ws = v.get("workloads", [])
print(f"bench-validate: {v.get('definition')} {len(ws)} workloads, status {v.get('status')}")
print(f"{'measure':36s} {'seconds':>8s}")
print(f"{'whole process (median of ' + str(len(walls)) + ')':36s} {median:8.3f}   target {target} "
      f"{'PASS' if median <= target else 'FAIL'}")
print(f"{'  runs':36s} {' '.join(f'{w:.3f}' for w in walls)}")
print(f"{'  compile (parent)':36s} {v.get('compile', {}).get('seconds', float('nan')):8.3f}")
print(f"{'  worker process':36s} {v.get('seconds', float('nan')):8.3f}")
checks = sum(t.get("seconds", 0) for w in ws for t in w.get("trials", []))
print(f"{'    correctness trials (sum)':36s} {checks:8.3f}")
timed = [w.get("timing", {}).get("seconds") for w in ws]
timed = [t for t in timed if t is not None]
if timed:
    print(f"{'    timing (sum; per workload)':36s} {sum(timed):8.3f}   {sum(timed) / len(timed):.3f}")
phases = [w.get("timing", {}).get("phases") for w in ws]
phases = [p for p in phases if p]
if phases:
    tot = lambda k: sum(p.get(k, 0) for p in phases)
    print(f"{'      setup (inputs, references, modules)':36s} {tot('setup_seconds'):8.3f}")
    print(f"{'      warmup':36s} {tot('warmup_seconds'):8.3f}")
    print(f"{'      sampling loop':36s} {tot('run_seconds') - tot('warmup_seconds'):8.3f}")
    print(f"{'        harvests (host waits, reads)':36s} {tot('harvest_seconds'):8.3f}   "
          f"{int(tot('harvests'))} harvests, {int(tot('rounds'))} rounds")
    for key, what in (("wait", "waits on iterations"), ("clock", "SM clock reads"),
                      ("timer", "timer records (CUPTI flush)"), ("check", "check records"),
                      ("integrity", "guards, inputs, sealed refs")):
        print(f"{'          ' + what:36s} {tot('harvest_' + key + '_seconds'):8.3f}")
    samples = [w["timing"]["candidate"].get("count") for w in ws if "candidate" in w.get("timing", {})]
    if samples and all(isinstance(x, (int, float)) for x in samples):
        print(f"{'      candidate samples per workload':36s} {min(samples)}-{max(samples)}")
phase_times = v.get("phases", {})
if phase_times:
    print("verdict phases (s): " + ", ".join(f"{k} {x:.3f}" for k, x in phase_times.items()
                                              if isinstance(x, (int, float))))
print(f"BENCH validate median={median:.3f} target={target} workloads={len(ws)}")
sys.exit(0 if median <= target else 1)
PY
