#!/usr/bin/env bash
# CTest fib_export_run (GPU): the generated launcher of an exported plan with variants, run. Exports
# tests/fixtures/check/dispatch_by_batch.cu (rmsnorm_h4096: one kernel up to batch 8, another up
# to 512, a third above), builds the sources as FlashInfer-Bench's tvm-ffi builder does (nvcc
# -std=c++17 -O2 per .cu file, one shared library with libtvm_ffi and libcudart), and calls the
# launcher through its tvm-ffi symbol at batch sizes that select each variant
# (tests/fixtures/export/rmsnorm_launcher_driver.cpp), every output element checked against the
# definition's formula and tolerance, as kharness checks the same source. Needs a GPU, nvcc and
# tvm-ffi ($TVM_FFI_ROOT, else the wheel in .fib-wheels/); skips (77) without them.
#   tests/fib_export_run.sh KHARNESS_BINARY SOURCE_DIR
set -euo pipefail
KHARNESS="$1"
SRC="$2"
skip() { echo "SKIP: $*"; exit 77; }
NVCC="$(command -v nvcc || true)"
[[ -n "$NVCC" || ! -x /usr/local/cuda/bin/nvcc ]] || NVCC=/usr/local/cuda/bin/nvcc
[[ -n "$NVCC" ]] || skip "no nvcc"
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || skip "no GPU"
command -v python3 >/dev/null || skip "no python3"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
ROOT="${TVM_FFI_ROOT:-}"
if [[ -z "$ROOT" ]]; then
  WHEEL="$(ls "$SRC"/.fib-wheels/apache_tvm_ffi-*.whl 2>/dev/null | head -1 || true)"
  [[ -n "$WHEEL" ]] || skip "no tvm-ffi (set TVM_FFI_ROOT or run scripts/fetch-fib-wheels.sh)"
  python3 -m zipfile -e "$WHEEL" "$WORK/wheel" >/dev/null
  ROOT="$WORK/wheel/tvm_ffi"
fi
[[ -f "$ROOT/include/tvm/ffi/c_api.h" && -f "$ROOT/lib/libtvm_ffi.so" ]] ||
  skip "$ROOT has no include/tvm/ffi or lib/libtvm_ffi.so"
CUDA="$(cd "$(dirname "$NVCC")/.." && pwd)"
export KHARNESS_ARCHIVE="$WORK/archive"
"$KHARNESS" export "$SRC/tests/fixtures/check/dispatch_by_batch.cu" --operator rmsnorm_h4096 \
  --fib "$WORK/fib_solution.json"
python3 - "$WORK/fib_solution.json" "$WORK/src" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))
for f in s["sources"]:
    p = os.path.join(sys.argv[2], f["path"])
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "w").write(f["content"])
PY
entry="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["spec"]["entry_point"].split("::")[-1])' "$WORK/fib_solution.json")"
objs=()
for cu in "$WORK"/src/*.cu; do
  "$NVCC" -Xcompiler -fPIC -std=c++17 -O2 -arch=native -I"$ROOT/include" -I"$WORK/src" \
    -c "$cu" -o "$cu.o"
  objs+=("$cu.o")
done
g++ -shared "${objs[@]}" -L"$ROOT/lib" -ltvm_ffi -L"$CUDA/lib64" -lcudart -Wl,--no-undefined \
  -o "$WORK/solution.so"
g++ -std=c++17 -O2 -I"$ROOT/include" -I"$CUDA/include" \
  "$SRC/tests/fixtures/export/rmsnorm_launcher_driver.cpp" -L"$ROOT/lib" -ltvm_ffi \
  -L"$CUDA/lib64" -lcudart -ldl -o "$WORK/driver"
# batch_size 4 and 8 take variant 0 (<= 8), 9 and 100 variant 1 (<= 512), 513 and 1531 variant 2.
LD_LIBRARY_PATH="$ROOT/lib:$CUDA/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$WORK/driver" "$WORK/solution.so" "$entry" 4 8 9 100 513 1531
