#!/usr/bin/env bash
# The pool on one GPU (docs/pipeline.md#pools-and-gpus): `kharness score` of one folder with --gpus 0 (one
# worker) and with --gpus 0,0 (two workers sharing GPU 0). The per-GPU lock lets the second
# worker check while the first times, but never time alongside it, so the verdicts must be the
# same and the timed latencies equal within the noise between two runs (target: 2%).
# On a host with several GPUs the same comparison measures scaling:
# CONFIGS="0 0,1 all" SCALE=1 scripts/bench-pool.sh gives, per --gpus, the wall time,
# submissions per GPU-minute, the speed-up over the first configuration and the efficiency
# (speed-up / GPUs; goal >= 0.9), whether every verdict names the GPU it ran on, and each GPU's
# latencies against the first configuration's (the spread between the host's GPUs).
#
#   scripts/bench-pool.sh [KHARNESS_BINARY]     (default build/kharness; run from anywhere)
#
# The folder: the shipped fixtures (tests/fixtures/good and bad) plus the seeds of SEED_OPS
# (default: rmsnorm_h4096 fused_add_rmsnorm_h4096 silu_and_mul_i14336 copy_f32), 23 submissions;
# with SCALE=1 also their baselines and TUNE_CONFIGS (default 6) tune configurations of each of
# SCALE_TUNE_OPS (default rmsnorm_h4096 gemm_n6144_k4096; `kharness tune-space --sample`): 41.
# CONFIGS (default "0 0,0") are the --gpus values compared, the first being the reference;
# SCORE_FLAGS are added to every score (default --seed 1: the same inputs in every run); each run
# has a private archive and --no-cache, so nothing is reused between them. KEEP=1 keeps the
# folder of reports (printed). Exit 0 when the statuses are identical and every latency ratio is
# within MAX_DEVIATION (default 0.02) of 1.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KHARNESS="$(realpath "${1:-$ROOT/build/kharness}")"
[[ -x "$KHARNESS" ]] || { echo "bench-pool: no kharness binary at '$KHARNESS'" >&2; exit 2; }
SEED_OPS="${SEED_OPS:-rmsnorm_h4096 fused_add_rmsnorm_h4096 silu_and_mul_i14336 copy_f32}"
read -r -a CONFIGS <<< "${CONFIGS:-0 0,0}"
read -r -a FLAGS <<< "${SCORE_FLAGS:---seed 1}"
MAX_DEVIATION="${MAX_DEVIATION:-0.02}"
TMP="$(mktemp -d /tmp/kharness-bench-pool.XXXXXX)"
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$TMP"' EXIT

SUBS="$TMP/submissions"
mkdir -p "$SUBS/bad"
cp -r "$ROOT/tests/fixtures/good/." "$SUBS/"
cp "$ROOT"/tests/fixtures/bad/*.cu "$SUBS/bad/"
for op in $SEED_OPS; do cp "$ROOT/operators/$op/seed.cu" "$SUBS/seed_$op.cu"; done
if [[ "${SCALE:-0}" == 1 ]]; then
  for op in $SEED_OPS; do
    base="$ROOT/operators/$op/baseline/solution.cu"
    [[ -f "$base" ]] && cp "$base" "$SUBS/baseline_$op.cu"
  done
  for op in ${SCALE_TUNE_OPS:-rmsnorm_h4096 gemm_n6144_k4096}; do
    mkdir -p "$SUBS/tune_$op"
    "$KHARNESS" tune-space "$op" --sample "${TUNE_CONFIGS:-6}" --out "$SUBS/tune_$op" \
      > /dev/null 2> "$TMP/tune_$op.err" ||
      { echo "bench-pool: tune-space $op failed"; tail -c 1000 "$TMP/tune_$op.err"; exit 1; }
  done
fi

echo "bench-pool: scoring $SUBS with --gpus ${CONFIGS[*]}"

for cfg in "${CONFIGS[@]}"; do
  name="gpus-${cfg//,/_}"
  start="$EPOCHREALTIME"
  "$KHARNESS" --archive "$TMP/$name.archive" score "$SUBS" --gpus "$cfg" --no-cache \
    "${FLAGS[@]}" --json "$TMP/$name.json" > "$TMP/$name.md" 2> "$TMP/$name.err"
  rc=$?
  echo "$cfg $rc $start $EPOCHREALTIME" >> "$TMP/walls"
  if ((rc > 1)); then
    echo "bench-pool: score --gpus $cfg exited $rc"; tail -c 2000 "$TMP/$name.err"; exit 1
  fi
done

python3 - "$TMP" "$MAX_DEVIATION" "${CONFIGS[@]}" <<'PY'
import json, math, sys
tmp, limit, configs = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
walls = {}
for line in open(f"{tmp}/walls"):
    cfg, rc, start, end = line.split()
    walls[cfg] = (int(rc), float(end) - float(start))
def load(cfg):
    return json.load(open(f"{tmp}/gpus-{cfg.replace(',', '_')}.json"))["solutions"]
runs = {cfg: load(cfg) for cfg in configs}
ref = configs[0]

def latencies(v):
    out = {}
    for w in v.get("workloads", []):
        lat = w.get("timing", {}).get("candidate", {}).get("latency")
        if lat:
            out[w["uuid"]] = lat
    return out

def gpu_of(v):
    env = v.get("environment") or {}
    return env.get("gpu_uuid") or (str(env["gpu_index"]) if "gpu_index" in env else None)

def ran_on_gpu(v):  # a verdict that reached a worker (not a compile failure or a bad input)
    return bool(v.get("environment"))

print(f"{len(runs[ref])} submissions")
print()
print("| --gpus | workers | GPUs | wall time | exit | passed | submissions / GPU-minute | "
      "speed-up | efficiency | verdicts naming their GPU | GPU lock wait (sum) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
ref_wall = walls[ref][1]
ref_gpus = max(1, len({gpu_of(v) for v in runs[ref] if gpu_of(v)}))
for cfg in configs:
    vs = runs[cfg]
    waited = sum(v.get("phases", {}).get("gpu_lock_wait", 0) for v in vs)
    passed = sum(1 for v in vs if v["status"] == "PASSED")
    rc, wall = walls[cfg]
    gpus = max(1, len({gpu_of(v) for v in vs if gpu_of(v)}))
    workers = "-" if cfg == "all" else len(cfg.split(","))
    on_gpu = [v for v in vs if ran_on_gpu(v)]
    named = sum(1 for v in on_gpu if gpu_of(v))
    speedup = ref_wall / wall
    print(f"| {cfg} | {workers} | {gpus} | {wall:.1f} s | {rc} | {passed}/{len(vs)} | "
          f"{len(vs) / (wall * gpus / 60):.1f} | {speedup:.2f}x | "
          f"{speedup / (gpus / ref_gpus):.2f} | {named}/{len(on_gpu)} | {waited:.1f} s |")

identical = True
worst = 0.0
timed = 0
for cfg in configs[1:]:
    a = {v["source"]: v for v in runs[ref]}
    b = {v["source"]: v for v in runs[cfg]}
    same = [s for s in a] == [s for s in b] and all(
        a[s]["status"] == b[s]["status"] and
        (a[s].get("failure") or {}).get("kind") == (b[s].get("failure") or {}).get("kind")
        for s in a)
    identical = identical and same
    print()
    print(f"per-solution latency, --gpus {cfg} over --gpus {ref} (geometric mean over workloads; "
          "max |ratio-1| of a workload):")
    print()
    print("| solution | status | GPU | workloads | latency ratio | max workload deviation |")
    print("|---|---|---|---|---|---|")
    by_gpu = {}  # the GPU a solution ran on in this configuration: its latency ratios
    for s in a:
        la, lb = latencies(a[s]), latencies(b.get(s, {}))
        common = [u for u in la if u in lb]
        name = s.rsplit("/", 1)[-1]
        gpu = (b.get(s, {}).get("environment") or {}).get("gpu_index", "-")
        if not common:
            print(f"| {name} | {a[s]['status']} / {b.get(s, {}).get('status')} | {gpu} | 0 | - "
                  "| - |")
            continue
        ratios = [lb[u] / la[u] for u in common]
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        dev = max(abs(r - 1) for r in ratios)
        worst = max(worst, abs(geo - 1))
        timed += 1
        by_gpu.setdefault(gpu, []).extend(ratios)
        print(f"| {name} | {a[s]['status']} | {gpu} | {len(common)} | {geo:.4f} | "
              f"{100 * dev:.2f}% |")
    if len(by_gpu) > 1:
        print()
        print(f"latency by GPU, --gpus {cfg} over --gpus {ref} (every timed workload):")
        print()
        print("| GPU | workloads | geometric mean ratio | min | max |")
        print("|---|---|---|---|---|")
        for gpu, rs in sorted(by_gpu.items(), key=lambda kv: str(kv[0])):
            geo = math.exp(sum(math.log(r) for r in rs) / len(rs))
            print(f"| {gpu} | {len(rs)} | {geo:.4f} | {min(rs):.4f} | {max(rs):.4f} |")
print()
print(f"timed solutions compared: {timed}")
print(f"max |ratio-1| over solutions: {100 * worst:.2f}% (target <= {100 * limit:.0f}%)")
print(f"identical statuses: {'yes' if identical else 'no'}")
sys.exit(0 if identical and worst <= limit else 1)
PY
rc=$?
[[ "${KEEP:-0}" == 1 ]] && echo "bench-pool: reports kept in $TMP"
exit "$rc"
