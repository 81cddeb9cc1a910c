#!/usr/bin/env bash
# FlashInfer-Bench 0.1.2 as a peer, on a GPU machine: `kharness export --fib` of the rmsnorm, the
# fused_add_rmsnorm and a GEMM seed, run by FlashInfer-Bench's own runner (`flashinfer-bench run
# --local`) on a dataset made from FlashInfer-Bench's definitions and workloads, then a table of
# FlashInfer-Bench's statuses and mean latency beside kharness's (`kharness validate --json` of
# the same seeds, matched by workload axes). See ../shared/fib/PEER.md.
#
#   scripts/fib-peer.sh [FIB_DIR]
#     FIB_DIR              definitions/ and workloads/ (default ../shared/fib, else shared/fib)
#   Environment:
#     FIB_WHEELS           the wheels of PEER.md (default .fib-wheels/, from
#                          scripts/fetch-fib-wheels.sh; carried in the working tree, git-ignored)
#     FIB_PEER_OPS         operators to run (default "rmsnorm_h4096 fused_add_rmsnorm_h4096
#                          gemm_n6144_k4096")
#     FIB_PEER_OUT         where the dataset, traces and reports stay (default a temporary folder)
#     KHARNESS             the kharness binary (default build/kharness; built by scripts/setup.sh
#                          when absent)
#     FIB_PEER_SKIP_KHARNESS=1  only FlashInfer-Bench (no kharness validate)
# Exit 0 when every exported solution built and PASSED every workload under FlashInfer-Bench.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { echo "fib-peer: $*" >&2; }
die() { echo "fib-peer: error: $*" >&2; exit 1; }

FIB_DIR="${1:-}"
if [[ -z "$FIB_DIR" ]]; then
  for d in ../shared/fib shared/fib; do
    if [[ -d "$d/definitions" ]]; then FIB_DIR="$d"; break; fi
  done
fi
[[ -n "$FIB_DIR" && -d "$FIB_DIR/definitions" && -d "$FIB_DIR/workloads" ]] ||
  die "no FlashInfer-Bench definitions/ and workloads/ (give FIB_DIR; tried ../shared/fib, shared/fib)"
FIB_DIR="$(cd "$FIB_DIR" && pwd)"
WHEELS="${FIB_WHEELS:-$ROOT/.fib-wheels}"
ls "$WHEELS"/flashinfer_bench-0.1.2-*.whl >/dev/null 2>&1 ||
  die "no flashinfer_bench 0.1.2 wheel in $WHEELS (run scripts/fetch-fib-wheels.sh where PyPI is reachable, and carry .fib-wheels)"
OPS=(${FIB_PEER_OPS:-rmsnorm_h4096 fused_add_rmsnorm_h4096 gemm_n6144_k4096})
OUT="${FIB_PEER_OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export PATH="/usr/local/cuda/bin:$PATH"

# 1. kharness.
KHARNESS="${KHARNESS:-$ROOT/build/kharness}"
if [[ ! -x "$KHARNESS" ]]; then
  say "building kharness (scripts/setup.sh)"
  ./scripts/setup.sh >&2
  KHARNESS="$ROOT/build/kharness"
fi
export KHARNESS_ARCHIVE="$OUT/archive"
# The operators of this checkout, wherever the binary was built.
export KHARNESS_HOME="$ROOT"

# 2. FlashInfer-Bench from the wheels, without network, in a folder of its own.
PY="${PYTHON:-python3}"
SITE="$OUT/site"
if [[ ! -d "$SITE/flashinfer_bench" ]]; then
  say "installing $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS"
  "$PY" -m pip install --quiet --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl >&2
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export FIB_ENABLE_APPLY=0 FIB_ENABLE_TRACING=0 FIB_CACHE_PATH="$OUT/fib-cache"
"$PY" -c "import flashinfer_bench, tvm_ffi, torch; print('fib-peer: flashinfer-bench', \
flashinfer_bench.__version__ if hasattr(flashinfer_bench, '__version__') else '0.1.2', '| tvm-ffi', \
tvm_ffi.__version__, '| torch', torch.__version__, '| cuda', torch.cuda.is_available())" >&2

# 3. The dataset: FlashInfer-Bench's definitions and workloads of these operators, and the
#    exported seeds as its solutions.
DATASET="$OUT/dataset"
rm -rf "$DATASET"
mkdir -p "$DATASET"
declare -A SEED
for op in "${OPS[@]}"; do
  def="$(ls "$FIB_DIR"/definitions/*/"$op".json 2>/dev/null | head -1 || true)"
  [[ -n "$def" ]] || die "$FIB_DIR has no definition $op"
  op_type="$(basename "$(dirname "$def")")"
  mkdir -p "$DATASET/definitions/$op_type" "$DATASET/workloads/$op_type" "$DATASET/solutions/$op_type"
  cp "$def" "$DATASET/definitions/$op_type/"
  wl="$FIB_DIR/workloads/$op_type/$op.jsonl"
  [[ -f "$wl" ]] || die "$FIB_DIR has no workloads for $op"
  cp "$wl" "$DATASET/workloads/$op_type/"
  if [[ -f "operators/$op/seed.cu" ]]; then
    SEED[$op]="operators/$op/seed.cu"
  else
    family="$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("kharness",{}).get("family") or d["op_type"])' "operators/$op/definition.json")"
    SEED[$op]="operators/_families/$family/seed.cu"
  fi
  [[ -f "${SEED[$op]}" ]] || die "no seed for $op"
  say "export ${SEED[$op]} --operator $op"
  "$KHARNESS" export "${SEED[$op]}" --operator "$op" --name "kharness_${op}_seed" \
    --author kharness --fib "$DATASET/solutions/$op_type/kharness_${op}_seed.json" >&2
done

# 4. FlashInfer-Bench's runner.
say "flashinfer-bench run --local $DATASET"
set +e
"$PY" -c 'import sys; from flashinfer_bench.cli.main import cli; sys.argv[0] = "flashinfer-bench"; cli()' \
  run --local "$DATASET" --timeout 300 >"$OUT/fib-run.log" 2>&1
fib_rc=$?
set -e
tail -n 20 "$OUT/fib-run.log" >&2
((fib_rc == 0)) || say "flashinfer-bench exited $fib_rc (log: $OUT/fib-run.log)"

# 5. kharness on the same seeds (its own workloads of these operators; matched by axes below).
if [[ "${FIB_PEER_SKIP_KHARNESS:-0}" != 1 ]]; then
  for op in "${OPS[@]}"; do
    say "kharness validate ${SEED[$op]} --operator $op"
    # The shipped seeds, not untrusted submissions: no compile sandbox needed where Landlock is off.
    KHARNESS_ALLOW_UNSANDBOXED=1 "$KHARNESS" validate "${SEED[$op]}" --operator "$op" --json --max-time 1 \
      >"$OUT/kharness-$op.json" 2>"$OUT/kharness-$op.log" || say "kharness validate $op exited $?"
  done
fi

# 6. The table.
"$PY" - "$DATASET" "$OUT" "${OPS[@]}" <<'PY'
import collections, glob, json, os, sys
dataset, out, ops = sys.argv[1], sys.argv[2], sys.argv[3:]
traces = collections.defaultdict(list)
for path in glob.glob(os.path.join(dataset, "traces", "**", "*.jsonl"), recursive=True):
    for line in open(path):
        if line.strip():
            t = json.loads(line)
            traces[t["definition"]].append(t)
workloads = {}
for path in glob.glob(os.path.join(dataset, "workloads", "**", "*.jsonl"), recursive=True):
    for line in open(path):
        if line.strip():
            t = json.loads(line)
            workloads[t["workload"]["uuid"]] = t["workload"]["axes"]
ok = True
rows = []
detail = []
for op in ops:
    ts = [t for t in traces.get(op, []) if t.get("solution") == "kharness_%s_seed" % op]
    status = collections.Counter((t.get("evaluation") or {}).get("status", "?") for t in ts)
    fib_lat = {}
    for t in ts:
        ev = t.get("evaluation") or {}
        perf = ev.get("performance") or {}
        if ev.get("status") == "PASSED" and perf.get("latency_ms"):
            axes = json.dumps(t["workload"].get("axes") or workloads.get(t["workload"]["uuid"], {}), sort_keys=True)
            fib_lat[axes] = perf["latency_ms"] * 1e3  # us
    k_lat = {}
    kfile = os.path.join(out, "kharness-%s.json" % op)
    k_status = "-"
    if os.path.exists(kfile) and os.path.getsize(kfile) > 0:
        try:
            v = json.load(open(kfile))
            k_status = v.get("status", "?")
            for w in v.get("workloads", []):
                c = (w.get("timing") or {}).get("candidate") or {}
                if c.get("latency"):
                    k_lat[json.dumps(w.get("axes", {}), sort_keys=True)] = c["latency"] * 1e6
        except ValueError:
            k_status = "unreadable"
    common = sorted(set(fib_lat) & set(k_lat), key=lambda a: list(json.loads(a).values()))
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
    fib_mean = mean(list(fib_lat.values()))
    fib_common = mean([fib_lat[a] for a in common])
    k_common = mean([k_lat[a] for a in common])
    rows.append((op, len(ts), ", ".join("%s %d" % kv for kv in sorted(status.items())) or "no traces",
                 fib_mean, k_status, len(common), fib_common, k_common))
    for a in common:
        detail.append((op, a, fib_lat[a], k_lat[a]))
    if not ts or set(status) != {"PASSED"}:
        ok = False
print()
print("| solution | FIB workloads | FIB statuses | FIB mean latency (us) | kharness verdict | shapes in both | FIB mean (us) | kharness mean (us) | FIB / kharness |")
print("|---|---:|---|---:|---|---:|---:|---:|---:|")
for op, n, st, fm, ks, nc, fc, kc in rows:
    ratio = fc / kc if nc and kc else float("nan")
    print("| kharness_%s_seed | %d | %s | %.2f | %s | %d | %.2f | %.2f | %.2fx |" % (op, n, st, fm, ks, nc, fc, kc, ratio))
if detail:
    print()
    print("| definition | axes | FIB latency (us) | kharness latency (us) | FIB / kharness |")
    print("|---|---|---:|---:|---:|")
    for op, a, f, k in detail:
        print("| %s | %s | %.2f | %.2f | %.2fx |" % (op, " ".join("%s=%s" % kv for kv in json.loads(a).items()), f, k, f / k))
print()
print("FlashInfer-Bench times a host call with CUDA events (launcher overhead included); kharness "
      "times the kernels with CUPTI, L2 flushed: expect FIB to read higher.")
print("traces: %s/traces  logs: %s" % (dataset, out))
sys.exit(0 if ok else 1)
PY
