#!/usr/bin/env bash
# The full check on a GPU machine: configure and build (Release, Ninja) into build-device-test,
# then `kharness --version`, `kharness doctor`, the CPU tests, the GPU tests, and the compile
# benchmark. Every step runs even when an earlier one failed; a summary table comes last, and
# the exit status is non-zero when any step failed. Logs go to build-device-test/device-test-logs;
# when $OUT is set, the summary, an archive of all logs and the failed steps' logs go there too.
#
#   scripts/device-test.sh        BUILD_DIR (default build-device-test) and JOBS may be set.
#
# Environment: SKIP_STEPS (a regex of step names: configure build version doctor cpu-tests
# gpu-tests operators bench-compile bench-check bench-validate measure run-command bench-aa cheats bench-integrity run-tune
# bench-hopper-gemm bench-model bench-pool fib-peer check-families
# bench-profile bench-timing memcheck), SKIP_TIMING=1 (no ncu comparison), GPU_TESTS (regex of GPU test names),
# TIMING_ONLY and PROFILE_ONLY (the ONLY filters of bench-timing.sh and bench-profile.sh),
# OPERATORS (regex of operators for the operators step), TUNE_OPS (operators of the tune runs,
# default rmsnorm_h4096), RUN_BUDGET (default 12), RUN_MAX_TIME (seconds per run, default 590),
# DEADLINE (seconds: steps still running then are killed, later ones skipped, the summary printed:
# use it under a per-call time limit, e.g. DEADLINE=560).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${BUILD_DIR:-build-device-test}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
LOGS="$BUILD_DIR/device-test-logs"
rm -rf "$LOGS"  # only this invocation's logs: a skipped step must not show an earlier run's
mkdir -p "$LOGS"
KHARNESS="$BUILD_DIR/kharness"

if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# CuTe and CUTLASS headers for the CuTe tests: KHARNESS_CUTLASS, else the .cutlass folder that
# scripts/fetch-cutlass.sh fills (carry it to a machine that cannot reach PyPI); without either,
# those tests skip.
if [[ -z "${KHARNESS_CUTLASS:-}" && -f "$ROOT/.cutlass/include/cutlass/version.h" ]]; then
  export KHARNESS_CUTLASS="$ROOT/.cutlass/include"
fi

# A fresh archive for this run: verdicts cached by an earlier run at the same commit must not
# stand in for the tests and benchmarks of this one.
export KHARNESS_ARCHIVE="$(mktemp -d)"
STEPS=()    # "name|status|seconds"
FAILED=0
T0=$(date +%s)
# What the steps' functions read, for the `bash -c` that DEADLINE runs them in.
export ROOT BUILD_DIR JOBS LOGS KHARNESS

# step NAME COMMAND... : runs COMMAND, output to the terminal and $LOGS/NAME.log.
step() {
  local name="$1"; shift
  local log="$LOGS/$name.log" start end rc
  if [[ -n "${SKIP_STEPS:-}" && "$name" =~ ^(${SKIP_STEPS})$ ]]; then  # e.g. SKIP_STEPS='cpu-tests|memcheck'
    STEPS+=("$name|skipped|0")
    return 0
  fi
  # DEADLINE=SECONDS: every step ends by then (killed at the deadline), so the summary and the
  # logs always come back from a device machine that limits a call's time.
  local limit=()
  if [[ -n "${DEADLINE:-}" ]]; then
    local left=$((DEADLINE - ($(date +%s) - T0)))
    if ((left < 10)); then
      STEPS+=("$name|skipped (deadline)|0")
      return 0
    fi
    export -f $(declare -F | awk '{print $3}')
    limit=(timeout -k 5 "$left" bash -c '"$@"' "$name")
  fi
  echo
  echo "=== $name: $*"
  start=$(date +%s)
  "${limit[@]}" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  end=$(date +%s)
  if ((rc == 0)); then
    STEPS+=("$name|ok|$((end - start))")
  elif [[ -n "${DEADLINE:-}" ]] && ((rc == 124 || rc == 137)); then
    STEPS+=("$name|KILLED (deadline)|$((end - start))")
    FAILED=1
    echo "=== $name killed at the deadline (DEADLINE=$DEADLINE s)"
  else
    STEPS+=("$name|FAILED (exit $rc)|$((end - start))")
    FAILED=1
    echo "=== $name failed with exit status $rc"
  fi
  return 0
}

need_binary() {
  if [[ ! -x "$KHARNESS" ]]; then
    echo "no binary at $KHARNESS (the build failed)"
    return 1
  fi
  "$@"
}

# Counts "passed failed skipped" from a ctest JUnit file.
count_tests() {
  local junit="$1"
  if [[ ! -s "$junit" ]]; then echo "- - -"; return; fi
  python3 - "$junit" <<'PY' 2>/dev/null || echo "? ? ?"
import sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    status = case.get("status", "")
    if case.find("skipped") is not None or status in ("notrun", "disabled", "skipped"):
        skipped += 1
    elif case.find("failure") is not None or case.find("error") is not None or status == "fail":
        failed += 1
    else:
        passed += 1
print(passed, failed, skipped)
PY
}

GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
step configure cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release
step build cmake --build "$BUILD_DIR" --parallel "$JOBS"
step version need_binary "$KHARNESS" --version
step doctor need_binary "$KHARNESS" doctor
step cpu-tests ctest --test-dir "$BUILD_DIR" -L cpu --output-on-failure -j "$JOBS" \
  --no-tests=ignore --output-junit "$PWD/$LOGS/cpu-tests.xml"
# GPU tests: those that only check correctness run GPU_JOBS (default 4) at a time; those that time
# kernels, read counters or measure wall time run alone afterwards.
export SERIAL_GPU='^(ArchiveCacheGpu|BenchGpu|CheckMany|IntegrityGpu|CuptiTimerGpu|GpuEnvironment|HarnessKernelsGpu|HarnessKernelsGpuTest|MeasureGpu|ProfileGpu|RunGpu)[.]|^LaunchWatchdog[.]ProfileOf|^Fixtures/CheckFixture[.]|^CuteGpu[.]HopperGemmAgainstCublasLt$'
gpu_tests() {
  local rc=0
  rm -f "$LOGS/gpu-tests.xml" "$LOGS/gpu-tests-parallel.xml"
  local parallel="" serial="" name
  # GPU_TESTS=REGEX: only the GPU tests whose names match, split the same way.
  while read -r name; do
    [[ -z "${GPU_TESTS:-}" || "$name" =~ ${GPU_TESTS} ]] || continue
    if [[ "$name" =~ ${SERIAL_GPU} ]]; then serial+="|${name//./[.]}"; else parallel+="|${name//./[.]}"; fi
  done < <(ctest --test-dir "$BUILD_DIR" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: \([^ ]*\).*/\1/p')
  if [[ -n "$parallel" ]]; then
    ctest --test-dir "$BUILD_DIR" -L gpu -R "^(${parallel#|})\$" -j "${GPU_JOBS:-4}" \
      --output-on-failure --output-junit "$PWD/$LOGS/gpu-tests-parallel.xml" || rc=1
  fi
  if [[ -n "$serial" ]]; then
    ctest --test-dir "$BUILD_DIR" -L gpu -R "^(${serial#|})\$" --output-on-failure \
      --output-junit "$PWD/$LOGS/gpu-tests.xml" || rc=1
  fi
  [[ -n "$parallel$serial" ]] || { echo "no GPU test matches GPU_TESTS='${GPU_TESTS:-}'"; return 1; }
  return $rc
}
step gpu-tests gpu_tests
# Every shipped operator: its baseline checked on every workload (one trial), its seed validated
# (checked, then timed against the baseline on every workload); then one line per operator:
# workloads, seed and baseline latency ranges, seed % of speed-of-light.
check_operators() {
  local rc=0 op files seed baseline
  # OPERATORS=REGEX: only those operators (the table still lists every verdict in $LOGS).
  for op in $("$KHARNESS" operators list --json | python3 -c 'import json,sys; [print(o["name"]) for o in json.load(sys.stdin)]'); do
    [[ -z "${OPERATORS:-}" || "$op" =~ ${OPERATORS} ]] || continue
    files=$("$KHARNESS" operators show "$op" --json | python3 -c '
import json,sys
f=json.load(sys.stdin)["files"]
print(f.get("seed") or "-", f.get("baseline") or "-")')
    read -r seed baseline <<<"$files"
    [[ "$seed" != "-" ]] || continue
    echo "--- $op"
    if [[ "$baseline" != "-" ]]; then
      "$KHARNESS" check "$baseline" --operator "$op" --trials 1 --timeout 300 || rc=1
    fi
    "$KHARNESS" validate "$seed" --operator "$op" --trials 1 --timeout 600 --json \
      >"$LOGS/validate-$op.json" || rc=1
  done
  python3 - "$LOGS" <<'PY' | tee "$LOGS/operators-table.txt"
import glob, json, os, sys
def us(v): return f"{v*1e6:.1f}"
# Faster than light (docs/timing.md#faster-than-light): "ftl" is SUSPECT when the seed's verdict is; "seed/lb" and
# "base/lb" are the least latency / physical lower bound over the workloads (below 0.95 flags).
print(f"{'operator':55s} {'wl':>3s} {'status':8s} {'seed us (min-max)':>22s} {'baseline us (min-max)':>24s} {'seed % SOL':>13s} "
      f"{'ftl':>7s} {'seed/lb':>8s} {'base/lb':>8s}")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "validate-*.json"))):
    op = os.path.basename(f)[len("validate-"):-len(".json")]
    try:
        v = json.load(open(f))
    except Exception:
        print(f"{op:55s} (no verdict)"); continue
    ws = v.get("workloads", [])
    seed = [w["timing"]["candidate"]["latency"] for w in ws if "candidate" in w.get("timing", {})]
    base = [w["timing"]["baseline"]["latency"] for w in ws if "baseline" in w.get("timing", {})]
    sol = [100 * w["timing"]["sol"]["fraction"] for w in ws if "sol" in w.get("timing", {})]
    rng = lambda xs, f: f"{f(min(xs))}-{f(max(xs))}" if xs else "-"
    def over_bound(role):
        xs = [w["timing"][role]["latency"] / w["timing"]["lower_bound"]["seconds"] for w in ws
              if role in w.get("timing", {}) and w["timing"].get("lower_bound", {}).get("seconds")]
        return f"{min(xs):.2f}" if xs else "-"
    ftl = "SUSPECT" if v.get("suspect") else "ok"
    print(f"{op:55s} {len(ws):3d} {v.get('status','?'):8s} {rng(seed, us):>22s} {rng(base, us):>24s} "
          f"{rng(sol, lambda x: f'{x:.1f}'):>13s} {ftl:>7s} {over_bound('candidate'):>8s} "
          f"{over_bound('baseline'):>8s}")
PY
  return $rc
}
step operators need_binary check_operators
step bench-compile need_binary scripts/bench-compile.sh "$KHARNESS"
step bench-check need_binary scripts/bench-check.sh "$KHARNESS"
# Verdict speed: validate of the rmsnorm seed, caches off, median of 5 processes.
step bench-validate need_binary scripts/bench-validate.sh "$KHARNESS"
step measure need_binary "$KHARNESS" doctor --measure
# The command provider with a stand-in for a coding-agent CLI (tests/fixtures/agent/fake-claude.sh,
# answering the recorded rmsnorm answers as `claude -p --output-format json` would): five
# candidates, each with the verdict its answer must get.
run_command() {
  local state run="$LOGS/run-command"
  state="$(mktemp -d)"
  rm -rf "$run"  # a run folder of an earlier invocation would be refused
  "$KHARNESS" run --operator rmsnorm_h4096 --budget 5 --provider command --run-dir "$run" \
    --command "tests/fixtures/agent/fake-claude.sh tests/fixtures/replay/rmsnorm $state" \
    --out "$LOGS/run-command-best.cu" || return 1
  python3 - "$run/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
got = {c["id"]: c["status"] for c in s["candidates"]}
want = {"c0001": "PASSED", "c0002": "PASSED", "c0003": "INCORRECT_NUMERICAL",
        "c0004": "NO_CODE", "c0005": "COMPILE_ERROR"}
bad = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
print(f"command provider: {len(got) - 1} candidates, best {s['best']} {s['best_score']:.3f}x, "
      f"{s['tokens']} tokens; statuses {'as expected' if not bad else 'UNEXPECTED ' + str(bad)}")
sys.exit(1 if bad or len(got) != 6 else 0)
PY
}
step run-command need_binary run_command
# Real optimisation runs with the built-in offline generator (tune) over TUNE_OPS (default
# rmsnorm_h4096) at RUN_BUDGET candidates each, then the HTML report of everything. One line per
# run goes to run-tune-table.txt: wall time, candidates, best over the seed, % SOL, configuration.
run_tune() {
  local op rc=0
  for op in ${TUNE_OPS:-rmsnorm_h4096}; do
    rm -rf "$LOGS/run-$op"  # no table line from an earlier invocation
    "$KHARNESS" run --operator "$op" --budget "${RUN_BUDGET:-12}" --provider tune \
      --max-time "${RUN_MAX_TIME:-590}" --run-dir "$LOGS/run-$op" --out "$LOGS/run-$op-best.cu" ||
      rc=1
  done
  python3 - "$LOGS" ${TUNE_OPS:-rmsnorm_h4096} <<'PY' | tee "$LOGS/run-tune-table.txt"
import json, os, sys
print(f"{'tune run':55s} {'cands':>5s} {'wall s':>7s} {'stop':>7s} {'best':>6s} {'x seed':>7s} "
      f"{'x base':>7s} {'% SOL':>6s}  configuration")
for op in sys.argv[2:]:
    try:
        s = json.load(open(os.path.join(sys.argv[1], f"run-{op}", "summary.json")))
    except Exception as e:
        print(f"{op:55s} (no summary: {e})"); continue
    sol = s.get("best_sol_fraction")
    cfg = s.get("best_configuration")
    print(f"{op:55s} {len(s['candidates']) - 1:5d} {s['seconds']:7.1f} {s['stop_reason']:>7s} "
          f"{s['best']:>6s} {s.get('best_over_seed', 0):7.3f} {s['best_score']:7.3f} "
          f"{100 * sol if sol is not None else float('nan'):6.1f}  "
          f"{json.dumps(cfg) if cfg else ('seed defaults' if s['best'] == 'c0000' else '-')}")
PY
  "$KHARNESS" report --all --html "$LOGS/report.html" || rc=1
  return $rc
}
step bench-aa need_binary scripts/bench-aa.sh "$KHARNESS"
# The timing-integrity cheats and their honest twins (tests/fixtures/cheats), each through the command a user
# runs, against the verdict it must get; one table line per fixture.
cheats() {
  local rc=0 entry file op wl cmd status kind path
  local CHEATS=(
    "skip_if_finite.cu|rmsnorm_h4096|99179b18,e2c76f8d,082f6370|validate|INCORRECT_NUMERICAL|-"
    "compute_if_poison.cu|rmsnorm_h4096|99179b18,e2c76f8d,082f6370|validate|INCORRECT_NUMERICAL|-"
    "compute_if_nan.cu|rmsnorm_h4096|99179b18,e2c76f8d,082f6370|validate|INCORRECT_NUMERICAL|-"
    "gemm_fp8_skip_if_c_finite.cu|gemm_fp8|d8ea2ff1,deae70b3|validate|INCORRECT_NUMERICAL|-"
    "workspace_assumed_zero.cu|rmsnorm_h4096|99179b18,e2c76f8d|check|INCORRECT_NUMERICAL|nan_or_inf"
    "hang_first_launch.cu|rmsnorm_h4096|99179b18|validate|TIMEOUT|timeout"
    "input_cache.cu|rmsnorm_h4096|99179b18,e2c76f8d|validate|PASSED|>=38us"
    "loop_detector.cu|rmsnorm_h4096|99179b18,e2c76f8d|validate|PASSED|>=38us"
    "shared_leftover.cu|rmsnorm_h4096|99179b18,e2c76f8d,082f6370|validate|PASSED|-"
    "honest_globals.cu|rmsnorm_h4096|99179b18,e2c76f8d,082f6370|validate|PASSED|-"
    # Kept state (tests/fixtures/README.md): state channels keyed by an input fingerprint never hit
    # on fresh inputs (PASSED only at the honest path's spin); the slack cache writes past its
    # input's buffer; the sampler that tells checked launches apart and the partial-work cheats fail
    # (in the correctness trials already: they draw their poisons as the timed iterations do).
    "gemm_fp8_fnscope_global_cache.cu|gemm_fp8|d8ea2ff1,deae70b3|validate|PASSED|>=290us"
    "rmsnorm_constant_cache.cu|rmsnorm_h4096|99179b18,8e916c4a|validate|PASSED|>=38us"
    "rmsnorm_local_cache.cu|rmsnorm_h4096|99179b18,e2c76f8d|validate|PASSED|>=38us"
    "rmsnorm_slack_cache.cu|rmsnorm_h4096|99179b18,e2c76f8d|validate|RUNTIME_ERROR|-"
    "sampler_tells_checked.cu|tests/fixtures/cheats/top_k_top_p_sampling_from_probs_v4096.json|3f6c2a1e|validate|INCORRECT_NUMERICAL|distribution"
    "sampler_replay.cu|tests/fixtures/cheats/top_k_top_p_sampling_from_probs_v4096.json|3f6c2a1e|validate|PASSED|>=38us"
    "rmsnorm_partial_when_timed.cu|rmsnorm_h4096|e2c76f8d,d7fea54f|validate|INCORRECT_NUMERICAL|output_not_written"
    "gemm_fp8_partial_when_timed.cu|gemm_fp8|d8ea2ff1,deae70b3|validate|INCORRECT_NUMERICAL|output_not_written"
    # The honest twins: unusual habits that must still pass.
    "honest_persistent.cu|rmsnorm_h4096|99179b18,e2c76f8d,082f6370|validate|PASSED|-"
    "honest_cooperative.cu|rmsnorm_h4096|99179b18,e2c76f8d,082f6370|validate|PASSED|-"
    "honest_pdl.cu|rmsnorm_h4096|99179b18,e2c76f8d,082f6370|validate|PASSED|-"
    "honest_cluster.cu|rmsnorm_h4096|99179b18,e2c76f8d,082f6370|validate|PASSED|-"
    "honest_work_queue.cu|rmsnorm_h4096|99179b18,e2c76f8d,082f6370|validate|PASSED|-"
    "honest_splitk_atomics.cu|gemm_fp8|d8ea2ff1,deae70b3|validate|PASSED|-"
    "honest_rng_offset.cu|tests/fixtures/cheats/top_k_top_p_sampling_from_probs_v4096.json|3f6c2a1e,b81e0d57|validate|PASSED|-"
  )
  : >"$LOGS/cheats-table.txt"
  printf '%-30s %-9s %-20s %-20s %-22s %8s %s\n' fixture command expected "" got seconds ok \
    | tee -a "$LOGS/cheats-table.txt"
  for entry in "${CHEATS[@]}"; do
    IFS='|' read -r file op wl cmd status kind <<<"$entry"
    path="tests/fixtures/cheats/$file"
    [[ -f "$path" ]] || path="tests/fixtures/check/$file"
    local start end
    start=$(date +%s.%N)
    "$KHARNESS" "$cmd" "$path" --operator "$op" --workloads "$wl" --trials 1 --seed 5 --json \
      >"$LOGS/cheat-$file.json" 2>"$LOGS/cheat-$file.err"
    end=$(date +%s.%N)
    python3 - "$LOGS/cheat-$file.json" "$file" "$cmd" "$status" "$kind" "$start" "$end" \
      <<'PY2' | tee -a "$LOGS/cheats-table.txt" || rc=1
import json, sys
path, file, cmd, status, kind, start, end = sys.argv[1:]
try:
    v = json.load(open(path))
    v = v[0] if isinstance(v, list) else v
except Exception as e:
    print(f"{file:30s} {cmd:9s} {status:20s} {kind:20s} {'(no verdict)':22s} {float(end)-float(start):8.1f} NO"); sys.exit(1)
got_kind = (v.get("failure") or {}).get("kind", "-")
ok = v.get("status") == status
if kind.startswith(">="):
    floor = float(kind[2:-2]) * 1e-6
    lats = [w["timing"]["candidate"]["latency"] for w in v.get("workloads", []) if "candidate" in w.get("timing", {})]
    got_kind = f"min {min(lats)*1e6:.1f}us" if lats else "no timing"
    ok = ok and bool(lats) and min(lats) >= floor
elif kind != "-":
    ok = ok and got_kind == kind
print(f"{file:30s} {cmd:9s} {status:20s} {kind:20s} {v.get('status','?') + ' ' + got_kind:22s} {float(end)-float(start):8.1f} {'ok' if ok else 'NO'}")
sys.exit(0 if ok else 1)
PY2
  done
  return $rc
}
step cheats need_binary cheats
step bench-integrity need_binary env BEFORE=scripts/data/bench-integrity-before.json \
  scripts/bench-integrity.sh "$KHARNESS"
step run-tune need_binary run_tune
# The sm_90a GEMM seeds against cuBLASLt (fp16, and fp8 with native block scales): per workload
# table in bench-hopper-gemm.log, the geomeans the tables below quote.
step bench-hopper-gemm need_binary env KHARNESS="$KHARNESS" OUT_DIR="$LOGS/hopper-gemm" \
  scripts/bench-hopper-gemm.sh
# In-model validation: Llama-3.1-8B's layer with the seeds, with a biased kernel that passes its
# own check (must fail in the layer), and with short tune runs' best kernels, timed (table in
# bench-model.log; verdicts and reports in model/).
step bench-model need_binary env OUT_DIR="$LOGS/model" scripts/bench-model.sh "$KHARNESS"
# The worker pool on one GPU: score with --gpus 0 and --gpus 0,0, same verdicts,
# latencies within 2%.
step bench-pool need_binary scripts/bench-pool.sh "$KHARNESS"
# Exported seeds under FlashInfer-Bench's own runner (needs .fib-wheels/ carried).
if [[ -d .fib-wheels ]]; then
  step fib-peer need_binary env KHARNESS="$PWD/$KHARNESS" scripts/fib-peer.sh
fi
# The FlashInfer-Bench catalogue's families: seeds and baselines on every workload.
FIB_SNAPSHOT="${FIB_SNAPSHOT:-../shared/fib}"
[[ -d "$FIB_SNAPSHOT" ]] || FIB_SNAPSHOT=shared/fib
if [[ -d "$FIB_SNAPSHOT/definitions" ]]; then
  step check-families need_binary env TRIALS=1 scripts/check-families.sh "$FIB_SNAPSHOT" "$KHARNESS"
fi
if [[ -x scripts/bench-profile.sh ]]; then
  step bench-profile need_binary env ONLY="${PROFILE_ONLY:-}" \
    timeout "${PROFILE_TIMEOUT:-240}" scripts/bench-profile.sh "$KHARNESS"
fi
if [[ -z "${SKIP_TIMING:-}" ]]; then  # SKIP_TIMING=1: the ncu comparison takes minutes
  step bench-timing need_binary env ONLY="${TIMING_ONLY:-}" \
    timeout "${TIMING_TIMEOUT:-300}" scripts/bench-timing.sh "$KHARNESS"
fi
# The worker under compute-sanitizer on the good fixtures: any memcheck error fails the worker
# (exit 9), which fails the verdict. Kernels run many times slower under it: a generous
# --launch-timeout.
sanitize() {
  local log="$PWD/$LOGS/memcheck-report.txt"
  KHARNESS_WORKER_WRAPPER="compute-sanitizer --tool memcheck --error-exitcode 9 --log-file ${log}.%p" \
    "$KHARNESS" check tests/fixtures/check/good_simple.cu tests/fixtures/check/good_vectorized.cu \
    operators/rmsnorm_h4096/seed.cu --operator rmsnorm_h4096 --trials 1 --timeout 500 \
    --launch-timeout 120 --seed 7 \
    --workloads 99179b18,5024178e,e0a97922,082f6370 &&
    grep -h "ERROR SUMMARY" "$log"*
}
if command -v compute-sanitizer >/dev/null 2>&1 && [[ -d tests/fixtures/check ]]; then
  step memcheck need_binary sanitize
fi

GPU="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
[[ -n "$GPU" ]] || GPU="none found (nvidia-smi failed)"
read -r CPU_P CPU_F CPU_S < <(count_tests "$LOGS/cpu-tests.xml")
read -r GPU_P GPU_F GPU_S < <(count_tests "$LOGS/gpu-tests.xml")
if [[ -s "$LOGS/gpu-tests-parallel.xml" ]]; then
  read -r P2 F2 S2 < <(count_tests "$LOGS/gpu-tests-parallel.xml")
  if [[ "$GPU_P" =~ ^[0-9]+$ && "$P2" =~ ^[0-9]+$ ]]; then
    GPU_P=$((GPU_P + P2)); GPU_F=$((GPU_F + F2)); GPU_S=$((GPU_S + S2))
  else  # one of the two runs left no readable results: say so rather than show half
    GPU_P="$GPU_P+$P2"; GPU_F="$GPU_F+$F2"; GPU_S="$GPU_S+$S2"
  fi
fi
BENCH="$(grep -h '^BENCH ' "$LOGS/bench-compile.log" 2>/dev/null | tail -n 1)"
CHECK_BENCH="$(grep -h '^BENCH ' "$LOGS/bench-check.log" 2>/dev/null | tail -n 1)"
VALIDATE_BENCH="$(grep -h '^BENCH ' "$LOGS/bench-validate.log" 2>/dev/null | tail -n 1)"
AA_TABLE="$(sed -n '/^bench-aa:/,/^BENCH aa/p' "$LOGS/bench-aa.log" 2>/dev/null)"
INTEGRITY_TABLE="$(sed -n '/^bench-integrity:/,/^BENCH integrity/p' "$LOGS/bench-integrity.log" 2>/dev/null)"
TIMING_TABLE="$(sed -n '/^operator /,/^BENCH timing/p' "$LOGS/bench-timing.log" 2>/dev/null)"
bench_field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" ${BENCH#BENCH }"; }

{
  echo
  echo "================ device-test summary ================"
  printf '%-14s %-20s %8s\n' "step" "status" "seconds"
  for s in "${STEPS[@]}"; do
    IFS='|' read -r n st sec <<<"$s"
    printf '%-14s %-20s %8s\n' "$n" "$st" "$sec"
  done
  echo
  printf '%-10s %7s %7s %8s\n' "tests" "passed" "failed" "skipped"
  printf '%-10s %7s %7s %8s\n' "cpu" "$CPU_P" "$CPU_F" "$CPU_S"
  printf '%-10s %7s %7s %8s\n' "gpu" "$GPU_P" "$GPU_F" "$GPU_S"
  echo
  if [[ -n "$BENCH" ]]; then
    echo "compile (s): cold $(bench_field cold) [$(bench_field cold_result)]," \
      "cache hit $(bench_field hit) [$(bench_field hit_result)]," \
      "nvcc $(bench_field nvcc), nvcc/cold $(bench_field ratio)"
  else
    echo "compile bench: no figures (see $LOGS/bench-compile.log)"
  fi
  echo "check (s): ${CHECK_BENCH#BENCH }"
  echo "validate (s): ${VALIDATE_BENCH#BENCH }"
  [[ -s "$LOGS/operators-table.txt" ]] && echo && cat "$LOGS/operators-table.txt"
  [[ -s "$LOGS/run-tune-table.txt" ]] && echo && cat "$LOGS/run-tune-table.txt"
  [[ -s "$LOGS/run-command.log" ]] && grep -h '^command provider:' "$LOGS/run-command.log"
  [[ -n "$AA_TABLE" ]] && echo && echo "$AA_TABLE"
  [[ -s "$LOGS/cheats-table.txt" ]] && echo && cat "$LOGS/cheats-table.txt"
  [[ -n "$INTEGRITY_TABLE" ]] && echo && echo "$INTEGRITY_TABLE"
  [[ -s "$LOGS/bench-hopper-gemm.log" ]] && echo && grep -h -E '^(fp16|fp8):|^geomean' "$LOGS/bench-hopper-gemm.log"
  [[ -s "$LOGS/bench-pool.log" ]] && echo && tail -n 12 "$LOGS/bench-pool.log"
  [[ -s "$LOGS/fib-peer.log" ]] && echo && tail -n 12 "$LOGS/fib-peer.log"
  [[ -s "$LOGS/check-families.log" ]] && echo && grep -c -E '\bPASS\b' "$LOGS/check-families.log" | sed 's/^/check-families PASS lines: /'
  [[ -n "$TIMING_TABLE" ]] && echo && echo "$TIMING_TABLE"
  echo "GPU: $GPU"
  echo "result: $([[ $FAILED == 0 ]] && echo 'all steps passed' || echo 'SOME STEPS FAILED')"
} | tee "$LOGS/summary.txt"

# To $OUT: the summary, every log in one archive, and the logs of the failed steps one by one
# (few files, so that they all come back from a device machine that limits the count).
if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  cp "$LOGS/summary.txt" "$OUT/device-test-summary.txt" 2>/dev/null || true
  tar -czf "$OUT/device-test-logs.tar.gz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")" 2>/dev/null || true
  for s in "${STEPS[@]}"; do
    IFS='|' read -r n st _ <<<"$s"
    if [[ $st == FAILED* || $st == KILLED* ]]; then
      cp "$LOGS/$n.log" "$OUT/device-test-$n.log" 2>/dev/null || true
    fi
  done
fi
exit "$FAILED"
