#!/usr/bin/env bash
# GPU evidence for the operator families: `kharness check` of the reference families added for the
# FlashInfer-Bench catalogue. For every definition of a FlashInfer-Bench snapshot whose family is
# one of FAMILIES, the family's seed and baseline (where it has them) are checked on every
# workload of the definition (shipped, or synthesized from family.json where none shipped); one
# line per (definition, solution): PASS, FAIL (with the verdict's first failure) or MISSING.
# The exit status is 1 when any check failed, 0 otherwise.
#
#   scripts/check-families.sh [FIB_DIR] [KHARNESS_BINARY]
#       FIB_DIR defaults to ../shared/fib, KHARNESS_BINARY to build/kharness.
# Environment: FAMILIES (a regex of family names, default: the issue-21 families), NAMES (a regex
# of definition names, default all), TRIALS (default 3), TIMEOUT (seconds per check, default 600),
# ROLES (default "seed baseline"; add "reference" to check the reference against itself).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
FIB="${1:-../shared/fib}"
KHARNESS="${2:-build/kharness}"
FAMILIES="${FAMILIES:-^(gqa_paged_prefill_causal(_ps1)?|gqa_ragged_prefill_causal|mla_paged_prefill_causal(_ps1)?|mla_ragged_prefill_causal|top_k_sampling_from_probs|top_p_sampling_from_probs|top_k_top_p_sampling_from_probs|moe_fp8_block_scale_ds_routing_topk8_ng1_kg1|moe_fp8_block_scale_renorm_topk(8|10)|trtllm_.*|gdn_mtp|mamba_ssu_decode|gqa_paged_decode_ps64|mla_paged_decode_ps64)$}"
NAMES="${NAMES:-.}"
TRIALS="${TRIALS:-3}"
TIMEOUT="${TIMEOUT:-600}"
ROLES="${ROLES:-seed baseline}"
[[ -x "$KHARNESS" ]] || { echo "check-families: no kharness binary at '$KHARNESS'" >&2; exit 2; }
[[ -d "$FIB/definitions" ]] || { echo "check-families: no definitions/ under '$FIB'" >&2; exit 2; }
# A private archive: cached verdicts of an earlier commit must not answer for this one.
export KHARNESS_ARCHIVE="$(mktemp -d)"
TMP="$(mktemp -d)"
trap 'rm -rf "$KHARNESS_ARCHIVE" "$TMP"' EXIT

pass=0 fail=0 missing=0
while IFS= read -r file; do
  name="$(basename "$file" .json)"
  [[ "$name" =~ $NAMES ]] || continue
  if ! "$KHARNESS" --operators-dir "$FIB" operators show "$file" --json >"$TMP/show.json" 2>"$TMP/show.err"; then
    continue  # not loadable: operators import says why
  fi
  read -r family workloads files < <(python3 - "$TMP/show.json" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1]))
ref = j["files"]["reference"]
family = os.path.basename(os.path.dirname(ref)) if ref != "-" else "-"
print(family, len(j["workloads"]), json.dumps(j["files"]).replace(" ", ""))
PY
)
  [[ "$family" =~ $FAMILIES ]] || continue
  for role in $ROLES; do
    path="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$files" "$role")"
    if [[ "$path" == "-" ]]; then
      printf '%-52s %-9s MISSING\n' "$name" "$role"; missing=$((missing + 1)); continue
    fi
    start=$(date +%s)
    "$KHARNESS" --operators-dir "$FIB" check "$path" --operator "$file" --trials "$TRIALS" \
      --timeout "$TIMEOUT" --json >"$TMP/verdict.json" 2>"$TMP/verdict.err"
    rc=$?
    secs=$(( $(date +%s) - start ))
    if ((rc == 0)); then
      printf '%-52s %-9s PASS  %s workloads, %ss\n' "$name" "$role" "$workloads" "$secs"
      pass=$((pass + 1))
    else
      why="$(python3 - "$TMP/verdict.json" "$TMP/verdict.err" <<'PY'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
    v = v[0] if isinstance(v, list) else v
    for w in v.get("workloads", []):
        if w.get("status") != "PASSED":
            f = w.get("failure") or {}
            print(w.get("uuid", "?")[:8], w.get("status"), f.get("kind", ""), f.get("message", "")[:160])
            break
    else:
        print(v.get("status"), (v.get("failure") or {}).get("message", "")[:200])
except Exception:
    print(open(sys.argv[2]).read().strip().splitlines()[-1:] or ["no output"])
PY
)"
      printf '%-52s %-9s FAIL  (exit %s, %ss) %s\n' "$name" "$role" "$rc" "$secs" "$why"
      fail=$((fail + 1))
    fi
  done
done < <(find "$FIB/definitions" -name '*.json' | sort)
# The sampling cheats (tests/fixtures/cheats/sampling_*.cu: argmax, top-k + 1, temperature 0.7),
# each checked against CHEAT_DEFINITION (default: the top-k-then-top-p definition of vocab 128256)
# with CHEAT_SEEDS (default "1 2 3") seeds: every verdict must be a failure.
caught=0 missed=0
cheat_def="$FIB/definitions/sampling/${CHEAT_DEFINITION:-top_k_top_p_sampling_from_probs_v128256}.json"
if [[ "top_k_top_p_sampling_from_probs" =~ $FAMILIES && -f "$cheat_def" ]]; then
  for fixture in tests/fixtures/cheats/sampling_*.cu; do
    for seed in ${CHEAT_SEEDS:-1 2 3}; do
      start=$(date +%s)
      "$KHARNESS" --operators-dir "$FIB" check "$fixture" --operator "$cheat_def" --trials "$TRIALS" \
        --seed "$seed" --timeout "$TIMEOUT" --json >"$TMP/verdict.json" 2>"$TMP/verdict.err"
      rc=$?
      secs=$(( $(date +%s) - start ))
      got="$(python3 -c '
import json, sys
try:
    v = json.load(open(sys.argv[1])); v = v[0] if isinstance(v, list) else v
    print(v.get("status", "?"), (v.get("failure") or {}).get("kind", "-"))
except Exception:
    print("no-verdict -")' "$TMP/verdict.json")"
      if ((rc == 1)) && [[ "$got" == INCORRECT_* ]]; then
        printf '%-52s %-9s CAUGHT (seed %s, %ss) %s\n' "$(basename "$fixture")" cheat "$seed" "$secs" "$got"
        caught=$((caught + 1))
      else
        printf '%-52s %-9s MISSED (seed %s, exit %s, %ss) %s\n' "$(basename "$fixture")" cheat "$seed" "$rc" "$secs" "$got"
        missed=$((missed + 1))
      fi
    done
  done
fi
echo "check-families: $pass PASS, $fail FAIL, $missing MISSING; sampling cheats $caught caught, $missed missed"
((fail == 0 && missed == 0))
