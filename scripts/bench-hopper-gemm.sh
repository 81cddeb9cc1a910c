#!/usr/bin/env bash
# Hopper GEMM against the vendor: `kharness validate --baseline cublaslt` of a gemm
# solution on gemm_n6144_k4096 and of a gemm_fp8 solution on gemm_fp8 (cuBLASLt's native
# 1x128 / 128x128 block-scaled fp8 GEMM), with the timing-integrity checks on (the default), and a
# table per workload: latency, cuBLASLt's, the ratio (x cuBLASLt: above 1 is faster than the
# vendor), TFLOP/s and % of speed of light; then the geomeans the issue's targets are stated in
# (fp16: x cuBLASLt over M >= 256 and over M < 256; fp8: % SOL over M >= 1024).
#
#   scripts/bench-hopper-gemm.sh [FP16_SOLUTION] [FP8_SOLUTION]
#   defaults: the families' sm_90a seeds; "-" skips that half. KHARNESS (default build/kharness),
#   OUT_DIR.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KHARNESS="${KHARNESS:-$ROOT/build/kharness}"
FP16="${1:-$ROOT/operators/_families/gemm/seed.sm_90a.cu}"
FP8="${2:-$ROOT/operators/_families/gemm_fp8/seed.sm_90a.cu}"
OUT_DIR="${OUT_DIR:-$(mktemp -d)}"
mkdir -p "$OUT_DIR"
rc=0
if [[ "$FP16" != - ]]; then
  "$KHARNESS" validate "$FP16" --operator gemm_n6144_k4096 --baseline cublaslt --trials 1 --json \
    >"$OUT_DIR/fp16.json" 2>"$OUT_DIR/fp16.txt" || rc=1
fi
if [[ "$FP8" != - ]]; then
  "$KHARNESS" validate "$FP8" --operator gemm_fp8 --baseline cublaslt --trials 1 --json \
    >"$OUT_DIR/fp8.json" 2>"$OUT_DIR/fp8.txt" || rc=1
fi
python3 - "$OUT_DIR" <<'PY'
import json, math, sys, os
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name + ".json")
    try:
        return json.load(open(p))
    except Exception as e:
        print(f"{name}: no verdict ({e}); see {os.path.join(out, name + '.txt')}")
        try: print(open(os.path.join(out, name + ".txt")).read()[-3000:])
        except Exception: pass
        return None
def geo(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
for name, split_axis, split in (("fp16", "M", 256), ("fp8", "M", 1024)):
    if not os.path.exists(os.path.join(out, name + ".txt")): continue
    v = load(name)
    if not v: continue
    print(f"\n{name}: {v.get('solution', '?')} -> {v.get('status')}")
    print(f"{'M':>6} {'N':>6} {'K':>6} {'status':8} {'us':>9} {'cublasLt us':>11} {'x cuBLASLt':>10} {'TFLOP/s':>8} {'% SOL':>6}")
    big, small, sol_big = [], [], []
    for w in v["workloads"]:
        ax = w.get("axes", {})
        t = w.get("timing", {})
        lat = t.get("candidate", {}).get("latency")
        base = t.get("baseline", {}).get("latency")
        # gemm_n6144_k4096's workloads give only M (N and K are constant axes).
        m, n, k = ax.get("M"), ax.get("N", 6144), ax.get("K", 4096)
        tf = 2 * m * n * k / lat / 1e12 if lat else float("nan")
        ratio = base / lat if (lat and base) else float("nan")
        sol = t.get("sol", {}).get("fraction", float("nan")) * 100
        (big if m >= split else small).append(ratio)
        if m >= split: sol_big.append(sol)
        f = lambda x, d=2: f"{x*1e6:.{d}f}" if x else "-"
        print(f"{m:6d} {n:6d} {k:6d} {w.get('status','?'):8} {f(lat):>9} {f(base):>11} {ratio:10.3f} {tf:8.1f} {sol:6.1f}"
              + (f"  (no cuBLASLt: {t['baseline_unavailable']})" if t.get("baseline_unavailable") else ""))
    print(f"geomean x cuBLASLt: M >= {split}: {geo(big):.3f}   M < {split}: {geo(small):.3f}   "
          f"mean % SOL at M >= {split}: {sum(sol_big)/max(len(sol_big),1):.1f}  geomean {geo(sol_big):.1f}")
PY
exit $rc
