#!/usr/bin/env bash
# CTest fib_export_nvcc: `kharness export --fib` of the rmsnorm, fused_add_rmsnorm and GEMM seeds,
# the sm_90a seeds of the fp16 GEMM and gemm_fp8 families (TMA tensor maps, 227 KiB of dynamic
# shared memory, a PDL split-K reduction), the PDL/cooperative fixture and a plan with variants
# (launches chosen by batch size: the launcher's if / else if chain), then the exported
# sources built as FlashInfer-Bench 0.1.2's tvm-ffi builder builds them (nvcc -std=c++17 -O2 per
# .cu file with the -gencode tvm-ffi writes for TVM_FFI_CUDA_ARCH_LIST="9.0a", one shared library
# with libtvm_ffi and libcudart), linked with no undefined symbol (so every kernel stub the
# launcher names exists, and the launcher reaches the driver only through the runtime) and
# exporting the tvm-ffi entry symbol. An export that needs sm_90a must stop a plain sm_90 build
# with an #error naming TVM_FFI_CUDA_ARCH_LIST; one that does not must say nothing of it. Needs nvcc and tvm-ffi's headers and library: $TVM_FFI_ROOT (a folder holding
# include/tvm/ffi and lib/libtvm_ffi.so, as the apache-tvm-ffi wheel's tvm_ffi/ does), else the
# wheel in .fib-wheels/ (scripts/fetch-fib-wheels.sh); skips (77) with a message without them.
#   tests/fib_export_nvcc.sh KHARNESS_BINARY SOURCE_DIR [json:EXPORTED.json ...]
# With json: arguments, only those Solution JSONs (exported already, e.g. by a test from a
# solution that exists only in memory) are built, each as above.
set -euo pipefail
KHARNESS="$1"
SRC="$2"
shift 2
skip() { echo "SKIP: $*"; exit 77; }
NVCC="$(command -v nvcc || true)"
[[ -n "$NVCC" || ! -x /usr/local/cuda/bin/nvcc ]] || NVCC=/usr/local/cuda/bin/nvcc
[[ -n "$NVCC" ]] || skip "no nvcc"
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
[[ -f "$ROOT/include/tvm/ffi/container/tensor.h" && -f "$ROOT/lib/libtvm_ffi.so" ]] ||
  skip "$ROOT has no include/tvm/ffi or lib/libtvm_ffi.so"
CUDA_LIB="$(cd "$(dirname "$NVCC")/.." && pwd)/lib64"
export KHARNESS_ARCHIVE="$WORK/archive"
status=0
SPECS=("$@")
((${#SPECS[@]})) || SPECS=(rmsnorm_h4096:operators/rmsnorm_h4096/seed.cu
  fused_add_rmsnorm_h4096:operators/fused_add_rmsnorm_h4096/seed.cu
  gemm_n6144_k4096:operators/_families/gemm/seed.cu
  gemm_n6144_k4096:operators/_families/gemm/seed.sm_90a.cu
  gemm_fp8:operators/_families/gemm_fp8/seed.sm_90a.cu
  copy_f32:tests/fixtures/launch/pdl_cooperative_copy.cu
  rmsnorm_h4096:tests/fixtures/check/dispatch_by_batch.cu)
n=0
for spec in "${SPECS[@]}"; do
  op="${spec%%:*}"
  seed="${spec#*:}"
  n=$((n + 1))
  out="$WORK/$n-$op-$(basename "${seed%.*}")"
  mkdir -p "$out"
  if [[ "$op" == json ]]; then
    cp "$seed" "$out/fib_solution.json"
    # The entry source: the file beside the launcher.
    seed="$(python3 -c 'import json,sys; print([f["path"] for f in json.load(open(sys.argv[1]))["sources"] if f["path"] != "kharness_fib_launcher.cu"][0])' "$seed")"
    op=json
  else
    "$KHARNESS" export "$SRC/$seed" --operator "$op" --fib "$out/fib_solution.json" --arch sm_90a
  fi
  # The sources as FlashInfer-Bench writes them: one folder, each file at its path.
  python3 - "$out/fib_solution.json" "$out/src" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))
assert s["spec"]["language"] == "cuda" and "::" in s["spec"]["entry_point"], s["spec"]
for f in s["sources"]:
    p = os.path.join(sys.argv[2], f["path"])
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "w").write(f["content"])
PY
  # The arch guard: present exactly when the export says the kernels need sm_90a.
  needs="$(python3 -c 'import json,sys; print("yes" if "TVM_FFI_CUDA_ARCH_LIST" in json.load(open(sys.argv[1]))["description"] else "no")' "$out/fib_solution.json")"
  kernel="$out/src/$(basename "$seed")"
  if "$NVCC" -E -std=c++17 -gencode=arch=compute_90,code=sm_90 -I"$ROOT/include" "$kernel" \
       -o /dev/null >"$out/plain.log" 2>&1; then
    plain=ok
  else
    plain=failed
  fi
  if [[ "$needs" == yes ]]; then
    if [[ "$plain" == failed ]] && grep -q 'TVM_FFI_CUDA_ARCH_LIST=9.0a' "$out/plain.log"; then
      echo "ok: $seed stops a plain sm_90 build with the setting it needs"
    else
      echo "FAIL: $seed needs sm_90a but a plain sm_90 build does not say TVM_FFI_CUDA_ARCH_LIST"
      status=1
    fi
  elif [[ "$plain" == failed ]]; then
    echo "FAIL: $seed does not need sm_90a but a plain sm_90 preprocess fails:"
    cat "$out/plain.log"
    status=1
  fi
  symbol="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["spec"]["entry_point"].split("::")[-1])' "$out/fib_solution.json")"
  objs=()
  for cu in "$out"/src/*.cu; do
    obj="$out/$(basename "$cu").o"
    "$NVCC" -Xcompiler -fPIC -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a \
      -I"$ROOT/include" -I"$out/src" -c "$cu" -o "$obj"
    objs+=("$obj")
  done
  g++ -shared "${objs[@]}" -L"$ROOT/lib" -ltvm_ffi -L"$CUDA_LIB" -lcudart -Wl,--no-undefined \
    -o "$out/$op.so"
  if nm -D --defined-only "$out/$op.so" | grep -q " __tvm_ffi_${symbol}\$"; then
    echo "ok: $seed ($op) builds, links with no undefined symbol and exports __tvm_ffi_${symbol}"
  else
    echo "FAIL: $seed ($op): the library does not export __tvm_ffi_${symbol}"
    status=1
  fi
done
exit $status
