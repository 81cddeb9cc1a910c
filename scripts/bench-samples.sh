#!/usr/bin/env bash
# A run's scaling with parallel candidates: `kharness run --provider tune` of one operator to the same budget
# with one candidate per step against several at once (--samples S: S candidates proposed per
# step, evaluated on the --gpus workers in parallel). One line per S: wall time to the budget, the
# candidates evaluated, the best speedup over the seed and over the baseline, and its % SOL.
#
#   scripts/bench-samples.sh [KHARNESS_BINARY]     (default build/kharness; run from anywhere)
#
# OP (default gemm_n6144_k4096), BUDGET (default 40), SAMPLES (default "1 2"; 4 on a 4-GPU host),
# GPUS (default all), MAX_TIME (seconds per run, default 900). Each run has a private archive, so
# no verdict is reused between them. Exit 1 when a run fails.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KHARNESS="$(realpath "${1:-$ROOT/build/kharness}")"
[[ -x "$KHARNESS" ]] || { echo "bench-samples: no kharness binary at '$KHARNESS'" >&2; exit 2; }
OP="${OP:-gemm_n6144_k4096}"
BUDGET="${BUDGET:-40}"
read -r -a SAMPLES <<< "${SAMPLES:-1 2}"
TMP="$(mktemp -d /tmp/kharness-bench-samples.XXXXXX)"
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$TMP"' EXIT

rc=0
for s in "${SAMPLES[@]}"; do
  echo "bench-samples: run --operator $OP --budget $BUDGET --samples $s --gpus ${GPUS:-all}"
  "$KHARNESS" --archive "$TMP/archive-$s" run --operator "$OP" --budget "$BUDGET" \
    --provider tune --samples "$s" --gpus "${GPUS:-all}" --max-time "${MAX_TIME:-900}" \
    --run-dir "$TMP/run-$s" > "$TMP/run-$s.log" 2>&1 ||
    { echo "bench-samples: --samples $s failed"; tail -c 2000 "$TMP/run-$s.log"; rc=1; }
done

python3 - "$TMP" "${SAMPLES[@]}" <<'PY'
import json, os, sys
tmp, samples = sys.argv[1], sys.argv[2:]
print()
print("| --samples | candidates | wall time | stop | best | x seed | x baseline | % SOL | GPUs |")
print("|---|---|---|---|---|---|---|---|---|")
for s in samples:
    try:
        summary = json.load(open(os.path.join(tmp, f"run-{s}", "summary.json")))
    except Exception as e:
        print(f"| {s} | (no summary: {e}) |||||||")
        continue
    gpus = set()
    for c in summary.get("candidates", []):
        cid = c.get("id") if isinstance(c, dict) else c
        try:
            v = json.load(open(os.path.join(tmp, f"run-{s}", "candidates", cid, "verdict.json")))
        except Exception:
            continue
        env = v.get("environment") or {}
        if "gpu_index" in env:
            gpus.add(env["gpu_index"])
    sol = summary.get("best_sol_fraction")
    print(f"| {s} | {len(summary['candidates']) - 1} | {summary['seconds']:.1f} s | "
          f"{summary['stop_reason']} | {summary['best']} | {summary.get('best_over_seed', 0):.3f} | "
          f"{summary['best_score']:.3f} | {100 * sol if sol is not None else float('nan'):.1f} | "
          f"{','.join(str(g) for g in sorted(gpus)) or '-'} |")
PY
exit "$rc"
