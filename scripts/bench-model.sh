#!/usr/bin/env bash
# In-model validation on a GPU machine (docs/controller.md, models/README.md): Llama-3.1-8B's
# decoder layer, LAYERS layers deep, checked and timed with kharness model-check.
#   1. every shipped seed substituted (the baseline layer), decode (batch 1/16/64, KV 1024-8192)
#      and prefill (ragged, up to 8192 tokens): must pass;
#   2. the biased fused residual-add RMSNorm fixture (0.5% too large, within its operator's own
#      tolerance): `kharness check` passes it, model-check must fail it naming the node and layer,
#      in both phases;
#   3. the best rmsnorm, GEMM (qkv) and decode attention that a short tune run finds (BUDGET
#      candidates each) substituted together, timed against the seeds' layer: the layer speedup
#      beside each kernel's own, and each node's share of the layer, whose sum must be within 5%
#      of the measured layer span.
# A table comes last; the exit status is non-zero when an expectation fails.
#
#   scripts/bench-model.sh [KHARNESS]     KHARNESS: the binary (default build/kharness)
#   Environment: OUT_DIR (verdicts, reports and best kernels; default a temporary folder),
#   LAYERS (default 4), BUDGET (tune candidates per operator, default 8), MODEL (default
#   llama-3.1-8b), PHASES (default "decode prefill"; the prefill checks run to 8192 tokens and
#   take minutes, so PHASES=decode for a short device call).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KHARNESS="${1:-build/kharness}"
OUT_DIR="${OUT_DIR:-$(mktemp -d)}"
LAYERS="${LAYERS:-4}"
BUDGET="${BUDGET:-8}"
MODEL="${MODEL:-llama-3.1-8b}"
BIASED=tests/fixtures/models/fused_add_rmsnorm_h4096_biased.cu
mkdir -p "$OUT_DIR"
ROWS=()  # "what|expected|got|seconds|ok"
FAILED=0

# check NAME EXPECTED(pass|fail) ARGS...: one model-check, its verdict in OUT_DIR/NAME.json.
check() {
  local name="$1" expected="$2"; shift 2
  local start end rc got ok
  start=$(date +%s.%N)
  "$KHARNESS" model-check --model "$MODEL" --layers "$LAYERS" "$@" --json "$OUT_DIR/$name.json" \
    --markdown "$OUT_DIR/$name.md" >"$OUT_DIR/$name.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  case $rc in 0) got=pass ;; 1) got=fail ;; *) got="exit $rc" ;; esac
  ok=NO
  [[ $got == "$expected" ]] && ok=ok
  [[ $ok == ok ]] || FAILED=1
  ROWS+=("$name|$expected|$got|$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')|$ok")
  echo "== $name: expected $expected, got $got (exit $rc)"
  tail -n 25 "$OUT_DIR/$name.log"
}

# The biased kernel passes its own operator's check: the drift is what model-check adds.
start=$(date +%s.%N)
"$KHARNESS" check "$BIASED" --operator fused_add_rmsnorm_h4096 --json >"$OUT_DIR/biased-check.json" \
  2>"$OUT_DIR/biased-check.log"
rc=$?
end=$(date +%s.%N)
ok=NO; [[ $rc == 0 ]] && ok=ok; [[ $ok == ok ]] || FAILED=1
ROWS+=("biased kernel, own operator check|pass|$([[ $rc == 0 ]] && echo pass || echo "exit $rc")|$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')|$ok")

PHASES="${PHASES:-decode prefill}"
for phase in $PHASES; do
  check "$phase-seeds" pass --phase "$phase"
  check "$phase-biased" fail --phase "$phase" --use "fused_add_rmsnorm_h4096=$BIASED"
done

# The best kernels of short tune runs, then the layer with them, timed.
USES=()
for op in rmsnorm_h4096 gemm_n6144_k4096 gqa_paged_decode_h32_kv8_d128_ps1; do
  start=$(date +%s.%N)
  "$KHARNESS" run --operator "$op" --provider tune --budget "$BUDGET" --seed 1 --no-profile \
    --no-archive --run-dir "$OUT_DIR/run-$op" --out "$OUT_DIR/best-$op.cu" \
    >"$OUT_DIR/run-$op.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  ok=NO; [[ $rc == 0 && -s "$OUT_DIR/best-$op.cu" ]] && ok=ok; [[ $ok == ok ]] || FAILED=1
  ROWS+=("tune $op (budget $BUDGET)|best kernel|exit $rc|$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')|$ok")
  tail -n 8 "$OUT_DIR/run-$op.log"
  [[ -s "$OUT_DIR/best-$op.cu" ]] && USES+=(--use "$op=$OUT_DIR/best-$op.cu")
done
check decode-best-timed pass --phase decode --time "${USES[@]}" --html "$OUT_DIR/decode-best.html"

# The timing table: per shape, the layer speedup, each substituted kernel's own, and whether the
# nodes' times sum to the measured span within 5%.
python3 - "$OUT_DIR/decode-best-timed.json" <<'PY' || FAILED=1
import json, sys
try:
    v = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no timed verdict: {e}"); sys.exit(1)
bad = 0
print(f"\n{'shape':28s} {'layer us':>9s} {'seeds us':>9s} {'layer x':>8s} {'sum/span':>9s}  substituted kernels (own speedup, share before -> after)")
for s in v.get("shapes", []):
    t = s.get("timing")
    if not t:
        print(f"{s['shape']:28s} (not timed: {s.get('failure', {}).get('reason', '?')})"); bad = 1; continue
    ratio = t["node_sum"] / t["seconds"] if t["seconds"] else 0
    subs = ", ".join(f"{n['node']} {n['speedup']:.2f}x {100*n['baseline_share']:.0f}%->{100*n['share']:.0f}%"
                     for n in t["nodes"] if n.get("substituted"))
    print(f"{s['shape']:28s} {t['seconds']*1e6:9.1f} {t['baseline_seconds']*1e6:9.1f} {t['speedup']:8.3f} {ratio:9.3f}  {subs}")
    if not t.get("sums_match") or abs(ratio - 1) > 0.05:
        bad = 1
sys.exit(bad)
PY

echo
printf '%-44s %-12s %-12s %8s %s\n' "model-check ($MODEL, $LAYERS layers)" expected got seconds ok
for r in "${ROWS[@]}"; do
  IFS='|' read -r what expected got secs ok <<<"$r"
  printf '%-44s %-12s %-12s %8s %s\n' "$what" "$expected" "$got" "$secs" "$ok"
done
echo "verdicts and reports: $OUT_DIR"
exit $FAILED
