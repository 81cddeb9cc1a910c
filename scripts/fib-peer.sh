#!/usr/bin/env bash
# FlashInfer-Bench 0.1.2 as a peer, on a GPU machine: `kharness export --fib` of portable seeds
# (rmsnorm, fused_add_rmsnorm, the fp16 GEMM, gemm_fp8), of the sm_90a seeds (the fp16 GEMM and gemm_fp8:
# TMA tensor maps, wgmma, a PDL split-K reduction), of a PDL + cooperative fixture and of a plan
# with variants (launches chosen by batch size, dispatched by the generated launcher), run by
# FlashInfer-Bench's own runner (`flashinfer-bench run --local`) on a dataset made from
# FlashInfer-Bench's definitions and workloads (kharness's own operator folder where
# FlashInfer-Bench has no such definition: gemm_fp8, copy_f32), then FlashInfer-Bench's status and
# latency beside kharness's (`kharness validate --json` of the same source) for every workload
# both ran, matched by axes. See ../shared/fib/PEER.md.
#
#   scripts/fib-peer.sh [FIB_DIR]
#     FIB_DIR              definitions/ and workloads/ (default ../shared/fib, else shared/fib)
#   Environment:
#     FIB_WHEELS           the wheels of PEER.md (default .fib-wheels/). The GPU machine has no
#                          network: run scripts/fetch-fib-wheels.sh here (3.5 MB, git-ignored),
#                          then carry the folder with the working tree, e.g. the device run tool's
#                          carry [".fib-wheels"] (and "build-device-test" to reuse a build).
#     FIB_PEER_SOLUTIONS   what to export and run: OP or OP:SOURCE, space-separated; OP alone is
#                          the operator's portable seed (default: the four portable seeds, the two
#                          sm_90a seeds, tests/fixtures/launch/pdl_cooperative_copy.cu and
#                          tests/fixtures/check/dispatch_by_batch.cu, a plan with variants)
#     FIB_PEER_INPUTS      definition (default): where kharness's definition declares input
#                          distributions other than FlashInfer-Bench's normal(0, 1) (gemm_fp8: fp8
#                          values ~ normal(0, 150), scales ~ uniform, so |C| ~ 1 as in DeepSeek-V3),
#                          the inputs are drawn from them and given as safetensors; random: FlashInfer-
#                          Bench's own draws (fp8 in +-2, scales ~ normal(0, 1), |C| ~ 85: a Hopper
#                          FP8 tensor-core kernel then misses atol = 0.01 on some elements, which is
#                          why FlashInfer-Bench's own fp8 MoE evaluator accepts 95% matched elements)
#     FIB_PEER_OUT         where the dataset, traces and reports stay (default a temporary folder)
#     KHARNESS             the kharness binary (default build/kharness; built by scripts/setup.sh
#                          when absent)
#     FIB_PEER_SKIP_KHARNESS=1  only FlashInfer-Bench (no kharness validate)
#   Within one 10-minute device call, the binary alone built first (Release):
#     cmake -S . -B build-device-test -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
#       cmake --build build-device-test --target kharness -j 16 >/dev/null &&
#       KHARNESS=$PWD/build-device-test/kharness scripts/fib-peer.sh
#   or as device-test.sh's step (it builds the tests too):
#     DEADLINE=560 SKIP_STEPS='version|doctor|cpu-tests|gpu-tests|operators|bench-.*|measure|run-command|cheats|run-tune|check-families|memcheck' scripts/device-test.sh
# FlashInfer-Bench's builder compiles for the GPU's plain arch unless TVM_FFI_CUDA_ARCH_LIST says
# otherwise (a Solution carries no compile flags); the sm_90a seeds need it, and their export says
# so in their description, which this script reads and follows, as a participant would.
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
SOLUTIONS=(${FIB_PEER_SOLUTIONS:-rmsnorm_h4096 fused_add_rmsnorm_h4096 gemm_n6144_k4096
  gemm_n6144_k4096:operators/_families/gemm/seed.sm_90a.cu
  gemm_fp8 gemm_fp8:operators/_families/gemm_fp8/seed.sm_90a.cu
  copy_f32:tests/fixtures/launch/pdl_cooperative_copy.cu
  rmsnorm_h4096:tests/fixtures/check/dispatch_by_batch.cu})
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

# 3. The dataset: the definitions and workloads of these operators (FlashInfer-Bench's, else
#    kharness's own operator folder, its workloads written as FlashInfer-Bench workload lines), and
#    the exported sources as its solutions.
DATASET="$OUT/dataset"
rm -rf "$DATASET"
mkdir -p "$DATASET"
ROWS=()  # "op|solution name|source"
ARCH_LIST=""
for entry in "${SOLUTIONS[@]}"; do
  op="${entry%%:*}"
  src=""
  [[ "$entry" == *:* ]] && src="${entry#*:}"
  def="$(ls "$FIB_DIR"/definitions/*/"$op".json 2>/dev/null | head -1 || true)"
  if [[ -n "$def" ]]; then
    op_type="$(basename "$(dirname "$def")")"
    wl="$FIB_DIR/workloads/$op_type/$op.jsonl"
    [[ -f "$wl" ]] || die "$FIB_DIR has no workloads for $op"
    mkdir -p "$DATASET/definitions/$op_type" "$DATASET/workloads/$op_type"
    cp "$def" "$DATASET/definitions/$op_type/"
    cp "$wl" "$DATASET/workloads/$op_type/"
  else
    [[ -f "operators/$op/definition.json" && -f "operators/$op/workloads.jsonl" ]] ||
      die "neither $FIB_DIR nor operators/ has the definition and workloads of $op"
    "$KHARNESS" operators show "$op" --json >"$OUT/operator-$op.json"
    op_type="$("$PY" - "$op" "$DATASET" "$OUT/operator-$op.json" "${FIB_PEER_INPUTS:-definition}" <<'PY'
import json, os, sys
op, dataset, shown, mode = sys.argv[1:5]
d = json.load(open("operators/%s/definition.json" % op))
d.pop("kharness", None)  # kharness's own settings; FlashInfer-Bench ignores unknown keys anyway
t = d["op_type"]
for sub in ("definitions", "workloads"):
    os.makedirs(os.path.join(dataset, sub, t), exist_ok=True)
json.dump(d, open(os.path.join(dataset, "definitions", t, op + ".json"), "w"), indent=2)
# FlashInfer-Bench draws a "random" input from normal(0, 1) (fp8: clamped to +-2); kharness's
# definition may declare other distributions (kharness.inputs), which its tolerance assumes. Where
# it does, the inputs are drawn from them here and given to FlashInfer-Bench as safetensors.
gens = (json.load(open(shown)).get("definition", {}).get("kharness", {}) or {}).get("inputs", {})
def fib_default(g):
    return g.get("distribution") == "normal" and g.get("mean", 0) == 0 and g.get("std", 1) == 1
declared = {n: g for n, g in gens.items() if n in d["inputs"] and not fib_default(g)}
usable = mode != "random" and declared and all(
    g.get("distribution") in ("normal", "uniform") for g in declared.values())
if declared and not usable:
    print("fib-peer: %s: FlashInfer-Bench's own random inputs (FIB_PEER_INPUTS=%s; declared: %s)"
          % (op, mode, ", ".join("%s %s" % (n, g.get("distribution")) for n, g in declared.items())),
          file=sys.stderr)
if usable:
    import torch
    from safetensors.torch import save_file
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
              "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
    print("fib-peer: %s: inputs drawn from the definition's distributions (%s) as safetensors"
          % (op, ", ".join("%s %s" % (n, g["distribution"]) for n, g in declared.items())),
          file=sys.stderr)
with open(os.path.join(dataset, "workloads", t, op + ".jsonl"), "w") as out:
    for index, line in enumerate(open("operators/%s/workloads.jsonl" % op)):
        if not line.strip():
            continue
        w = json.loads(line)
        w = w.get("workload", w)
        w.pop("kharness", None)
        if usable:
            gen = torch.Generator().manual_seed(1000 + index)
            tensors = {}
            for name, spec in d["inputs"].items():
                if name not in declared or w["inputs"].get(name, {}).get("type") != "random":
                    continue
                shape = [w["axes"][a] if isinstance(a, str) else a for a in spec.get("shape") or []]
                g = declared[name]
                x = torch.empty(shape, dtype=torch.float32)
                if g["distribution"] == "normal":
                    x.normal_(g.get("mean", 0.0), g.get("std", 1.0), generator=gen)
                else:
                    x.uniform_(g.get("low", 0.0), g.get("high", 1.0), generator=gen)
                dtype = dtypes[spec["dtype"]]
                if dtype == torch.float8_e4m3fn:
                    x.clamp_(-448.0, 448.0)  # saturated, as kharness's generator does
                tensors[name] = x.to(dtype).contiguous()
            rel = os.path.join("blob", op, w["uuid"] + ".safetensors")
            os.makedirs(os.path.join(dataset, "blob", op), exist_ok=True)
            save_file(tensors, os.path.join(dataset, rel))
            for name in tensors:
                w["inputs"][name] = {"type": "safetensors", "path": rel, "tensor_key": name}
        out.write(json.dumps({"definition": op, "solution": None, "workload": w,
                              "evaluation": None}) + "\n")
print(t)
PY
)"
  fi
  mkdir -p "$DATASET/solutions/$op_type"
  if [[ -z "$src" ]]; then
    if [[ -f "operators/$op/seed.cu" ]]; then
      src="operators/$op/seed.cu"
    else
      family="$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("kharness",{}).get("family") or d["op_type"])' "operators/$op/definition.json")"
      src="operators/_families/$family/seed.cu"
    fi
  fi
  [[ -f "$src" ]] || die "no source $src for $op"
  base="$(basename "$src" .cu)"
  name="kharness_${op}_${base//[^A-Za-z0-9_]/_}"
  say "export $src --operator $op as $name"
  "$KHARNESS" export "$src" --operator "$op" --name "$name" \
    --author kharness --fib "$DATASET/solutions/$op_type/$name.json" >&2
  # The one setting an arch-specific solution needs, as its export wrote it in the description.
  want="$("$PY" -c 'import json,re,sys; m=re.search(r"TVM_FFI_CUDA_ARCH_LIST=\"([^\"]*)\"", json.load(open(sys.argv[1]))["description"]); print(m.group(1) if m else "")' "$DATASET/solutions/$op_type/$name.json")"
  if [[ -n "$want" && " $ARCH_LIST " != *" $want "* ]]; then ARCH_LIST="${ARCH_LIST:+$ARCH_LIST }$want"; fi
  ROWS+=("$op|$name|$src")
done
if [[ -n "$ARCH_LIST" ]]; then
  # One list for the whole run: the portable solutions build for the arch-specific target too.
  export TVM_FFI_CUDA_ARCH_LIST="$ARCH_LIST"
  say "TVM_FFI_CUDA_ARCH_LIST=\"$ARCH_LIST\" (what the arch-specific exports ask for)"
fi

# The GPU's SM clock and power while each side times (nvidia-smi every 100 ms): sustained
# back-to-back launches can run at lower clocks than timing with gaps, which shows here.
CLOCKS_PID=""
clocks_start() {
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits \
    -lms 100 >"$OUT/clocks-$1.csv" 2>/dev/null &
  CLOCKS_PID=$!
}
clocks_stop() {
  [[ -n "$CLOCKS_PID" ]] || return 0
  kill "$CLOCKS_PID" 2>/dev/null; wait "$CLOCKS_PID" 2>/dev/null; CLOCKS_PID=""
}

# 4. FlashInfer-Bench's runner.
say "flashinfer-bench run --local $DATASET"
clocks_start fib
set +e
"$PY" -c 'import sys; from flashinfer_bench.cli.main import cli; sys.argv[0] = "flashinfer-bench"; cli()' \
  run --local "$DATASET" --timeout 300 >"$OUT/fib-run.log" 2>&1
fib_rc=$?
set -e
clocks_stop
tail -n 20 "$OUT/fib-run.log" >&2
((fib_rc == 0)) || say "flashinfer-bench exited $fib_rc (log: $OUT/fib-run.log)"

# 5. kharness on the same sources (its own workloads of these operators; matched by axes below).
if [[ "${FIB_PEER_SKIP_KHARNESS:-0}" != 1 ]]; then
  clocks_start kharness
  for row in "${ROWS[@]}"; do
    IFS='|' read -r op name src <<<"$row"
    say "kharness validate $src --operator $op"
    # Shipped seeds and fixtures, not untrusted submissions: no compile sandbox needed where
    # Landlock is off.
    KHARNESS_ALLOW_UNSANDBOXED=1 "$KHARNESS" validate "$src" --operator "$op" --json --max-time 1 \
      >"$OUT/kharness-$name.json" 2>"$OUT/kharness-$name.log" || say "kharness validate $src exited $?"
  done
  clocks_stop
fi

# 6. The tables: one line per solution, then one per workload FlashInfer-Bench ran, with
#    kharness's status and latency where kharness has a workload of the same axes.
"$PY" - "$DATASET" "$OUT" "${ROWS[@]}" <<'PY'
import collections, glob, json, os, sys
dataset, out, rows_in = sys.argv[1], sys.argv[2], sys.argv[3:]
traces = collections.defaultdict(list)
for path in glob.glob(os.path.join(dataset, "traces", "**", "*.jsonl"), recursive=True):
    for line in open(path):
        if line.strip():
            t = json.loads(line)
            traces[t.get("solution")].append(t)
workloads = {}
for path in glob.glob(os.path.join(dataset, "workloads", "**", "*.jsonl"), recursive=True):
    for line in open(path):
        if line.strip():
            t = json.loads(line)
            workloads[t["workload"]["uuid"]] = t["workload"]["axes"]
key = lambda axes: json.dumps(axes, sort_keys=True)
mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
ok = True
summary, detail = [], []
for row in rows_in:
    op, name, src = row.split("|", 2)
    ts = traces.get(name, [])
    status = collections.Counter((t.get("evaluation") or {}).get("status", "?") for t in ts)
    k_status, k_work = "-", {}
    kfile = os.path.join(out, "kharness-%s.json" % name)
    if os.path.exists(kfile) and os.path.getsize(kfile) > 0:
        try:
            v = json.load(open(kfile))
            k_status = v.get("status", "?")
            for w in v.get("workloads", []):
                c = (w.get("timing") or {}).get("candidate") or {}
                lat = c.get("latency") * 1e6 if c.get("latency") else None
                k_work[key(w.get("axes", {}))] = (w.get("status", "?"), lat)
        except ValueError:
            k_status = "unreadable"
    fib_lats, pairs = [], []
    for t in sorted(ts, key=lambda t: list((t["workload"].get("axes") or {}).values())):
        ev = t.get("evaluation") or {}
        axes = t["workload"].get("axes") or workloads.get(t["workload"]["uuid"], {})
        perf = ev.get("performance") or {}
        f_lat = perf["latency_ms"] * 1e3 if perf.get("latency_ms") else None
        if f_lat is not None and ev.get("status") == "PASSED":
            fib_lats.append(f_lat)
        k_st, k_lat = k_work.get(key(axes), ("-", None))
        if f_lat is not None and k_lat:
            pairs.append((f_lat, k_lat))
        corr = ev.get("correctness") or {}
        err = "-" if ev.get("status") == "PASSED" or not corr else "%.3g / %.3g" % (
            corr.get("max_absolute_error", float("nan")), corr.get("max_relative_error", float("nan")))
        detail.append((name, axes, ev.get("status", "?"), f_lat, k_st, k_lat, err))
    large = [(f, k) for f, k in pairs if k >= 500]
    summary.append((name, src, len(ts), ", ".join("%s %d" % kv for kv in sorted(status.items())) or "no traces",
                    mean(fib_lats), k_status, len(pairs), mean([f / k for f, k in pairs]),
                    len(large), max([abs(f / k - 1) for f, k in large], default=float("nan"))))
    if not ts or set(status) != {"PASSED"}:
        ok = False
fmt = lambda x: "-" if x is None or x != x else "%.2f" % x
print()
print("| solution | source | FIB workloads | FIB statuses | FIB mean latency (us) | kharness verdict | workloads in both | mean FIB / kharness | in both, kharness >= 500 us | largest deviation there |")
print("|---|---|---:|---|---:|---|---:|---:|---:|---:|")
for name, src, n, st, fm, ks, nc, r, nl, dev in summary:
    print("| %s | %s | %d | %s | %s | %s | %d | %sx | %d | %s |" % (
        name, src, n, st, fmt(fm), ks, nc, fmt(r), nl, "-" if dev != dev else "%.1f%%" % (dev * 100)))
print()
print("| solution | axes | FIB status | FIB max abs / rel error (not PASSED) | FIB latency (us) | kharness status | kharness latency (us) | FIB / kharness |")
print("|---|---|---|---|---:|---|---:|---:|")
for name, axes, fst, f, kst, k, err in detail:
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
        name, " ".join("%s=%s" % kv for kv in axes.items()), fst, err, fmt(f), kst, fmt(k),
        fmt(f / k) + "x" if f and k else "-"))
print()
print("FlashInfer-Bench times a host call with CUDA events (the launcher's checks, tensor-map "
      "encoding and launch overhead included); kharness times the kernels with CUPTI, L2 flushed: "
      "expect FIB to read higher on small workloads, and within a few percent on large ones.")
for side in ("fib", "kharness"):
    samples = []
    path = os.path.join(out, "clocks-%s.csv" % side)
    for line in open(path) if os.path.exists(path) else []:
        try:
            sm, power, temp = (float(x) for x in line.split(","))
        except ValueError:
            continue
        if power > 150:  # samples while a kernel ran, not the host-side set-up between them
            samples.append((sm, power, temp))
    if samples:
        sms = sorted(s[0] for s in samples)
        print("%s: GPU busy in %d samples: SM clock median %.0f MHz (min %.0f), power median %.0f W, "
              "max %.0f C" % ("FlashInfer-Bench" if side == "fib" else "kharness", len(samples),
                              sms[len(sms) // 2], sms[0], sorted(s[1] for s in samples)[len(samples) // 2],
                              max(s[2] for s in samples)))
print("traces: %s/traces  logs: %s" % (dataset, out))
sys.exit(0 if ok else 1)
PY
