#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang with ASan and UBSan) in build-fuzz and runs each
# for a bounded time over a seed corpus made from tests/fixtures and operators/. A crash, a
# sanitizer report, an internal error, a leak or an input taking more than TIMEOUT seconds fails
# the script; the input is left in build-fuzz/artifacts/ (make it a regression test: a fixture
# under tests/fixtures/fuzz/TARGET/, which tests/fuzz_regression_test.cpp replays on every build).
#
#   scripts/fuzz.sh [TARGET...]     targets: json plan definition rules archive walk families
#                                   run_folder (default: all)
#   FUZZ_SECONDS (default 30)       per target
#   FUZZ_BUILD_DIR (build-fuzz), FUZZ_JOBS (2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-30}"
TIMEOUT="${FUZZ_TIMEOUT:-10}"
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(json plan definition rules archive walk families run_folder)

say() { echo "fuzz: $*"; }
die() { echo "fuzz: error: $*" >&2; exit 1; }

CXX="${FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
[[ -n "$CXX" ]] || die "clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)"
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
  "$CXX" -x c++ -fsanitize=fuzzer,address,undefined -o /dev/null - 2>/dev/null ||
  die "$CXX cannot link -fsanitize=fuzzer,address,undefined (Debian: apt-get install libclang-rt-14-dev)"

if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  GENERATOR=()
  command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DKHARNESS_FUZZ=ON -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD" --parallel "${FUZZ_JOBS:-2}" --target "${TARGETS[@]/#/fuzz_}"

# Seeds: the fixtures and operators a target's input resembles, and every earlier finding.
seed() {  # seed TARGET FILE... : copies the files into the target's seed folder
  local dir="$BUILD/seeds/$1"
  shift
  for f in "$@"; do [[ -f "$f" ]] && cp "$f" "$dir/$(echo "$f" | sha1sum | cut -c1-16)"; done
  return 0
}
mkdir -p "$BUILD/artifacts"
for t in "${TARGETS[@]}"; do
  rm -rf "$BUILD/seeds/$t"
  mkdir -p "$BUILD/seeds/$t" "$BUILD/corpus/$t"
  shopt -s nullglob globstar
  case "$t" in
    json) seed json "$ROOT"/tests/fixtures/**/*.json "$ROOT"/operators/*/definition.json \
            "$ROOT"/configs/*.json "$ROOT"/operators/*/tune.json ;;
    plan | rules) seed "$t" "$ROOT"/tests/fixtures/**/*.cu "$ROOT"/operators/*/seed.cu \
                    "$ROOT"/operators/*/reference.cu ;;
    definition)
      seed definition "$ROOT"/tests/fixtures/defs/**/*.json "$ROOT"/operators/*/definition.json
      for op in rmsnorm_h4096 gemm_n4096_k4096; do
        d="$ROOT/operators/$op"
        [[ -f "$d/definition.json" && -f "$d/workloads.jsonl" ]] || continue
        { cat "$d/definition.json"; printf '\n---\n'; head -5 "$d/workloads.jsonl"; } \
          >"$BUILD/seeds/definition/$op-with-workloads"
      done ;;
    archive)
      i=0
      for f in "$ROOT"/tests/fixtures/**/*.json; do
        { printf "\\x$(printf %02x $((i % 7)))"; cat "$f"; } >"$BUILD/seeds/archive/$i"
        i=$((i + 1))
      done ;;
    families) seed families "$ROOT"/operators/*/seed.cu ;;
    # walk and run_folder read their input as steps (make this, link that): their seeds are the
    # hand-written probes under tests/fixtures/fuzz/TARGET/ alone.
  esac
  [[ -d "$ROOT/tests/fixtures/fuzz/$t" ]] && seed "$t" "$ROOT"/tests/fixtures/fuzz/"$t"/*
  shopt -u nullglob globstar
done

failed=()
for t in "${TARGETS[@]}"; do
  say "$t: ${SECONDS_PER_TARGET} s"
  log="$BUILD/fuzz_$t.log"
  [[ -x "$BUILD/fuzz_$t" ]] || die "$BUILD/fuzz_$t was not built"
  if "$BUILD/fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -timeout="$TIMEOUT" \
       -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$BUILD/artifacts/$t-" "$BUILD/corpus/$t" "$BUILD/seeds/$t" >"$log" 2>&1; then
    say "$t: $(grep -E 'stat::number_of_executed_units' "$log" | awk '{print $2}') executions, no finding"
  else
    failed+=("$t")
    tail -40 "$log" >&2
    say "$t: FAILED (log: $log, input: $BUILD/artifacts/$t-*)"
  fi
done
((${#failed[@]} == 0)) || die "findings in: ${failed[*]}"
say "done: ${TARGETS[*]}"
