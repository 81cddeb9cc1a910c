#!/usr/bin/env bash
# Fetches the CUTLASS headers (CuTe and CUTLASS) that CuTe solutions compile against: the
# nvidia-cutlass wheel from PyPI, downloaded with pip and unpacked (not installed) so that
# DEST/include holds cute/ and cutlass/. kharness never downloads anything itself; point it at
# the headers with KHARNESS_CUTLASS=DEST/include or --cutlass DEST.
#
#   scripts/fetch-cutlass.sh [DEST]    DEST defaults to .cutlass (ignored by git);
#                                      CUTLASS_WHEEL_VERSION (default 4.2.0.0) picks the release.
# Exit 0 with the headers in place (already there counts), 1 when pip or PyPI is unavailable.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$ROOT/.cutlass}"
VERSION="${CUTLASS_WHEEL_VERSION:-4.2.0.0}"
say() { echo "fetch-cutlass: $*" >&2; }

if [[ -f "$DEST/include/cutlass/version.h" && -f "$DEST/include/.wheel-$VERSION" ]]; then
  say "CUTLASS $VERSION headers already in $DEST/include"
  exit 0
fi
PYTHON="$(command -v python3 || true)"
if [[ -z "$PYTHON" ]] || ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
  say "no python3 with pip: cannot fetch the nvidia-cutlass wheel"
  exit 1
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if ! "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --timeout 20 --retries 1 \
    --dest "$TMP" "nvidia-cutlass==$VERSION" >&2; then
  say "pip could not download nvidia-cutlass==$VERSION (PyPI unreachable?)"
  exit 1
fi
WHEEL="$(ls "$TMP"/nvidia_cutlass-*.whl 2>/dev/null | head -n 1)"
[[ -n "$WHEEL" ]] || { say "no wheel in the download"; exit 1; }
# Only the headers: cutlass_library/source/include/{cute,cutlass}/...
"$PYTHON" - "$WHEEL" "$TMP/unpacked" <<'PY'
import sys, zipfile
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(sys.argv[1]) as wheel:
    names = [n for n in wheel.namelist() if n.startswith(prefix) and not n.endswith("/")]
    for name in names:
        wheel.extract(name, sys.argv[2])
print(f"{len(names)} headers", file=sys.stderr)
PY
[[ -f "$TMP/unpacked/cutlass_library/source/include/cutlass/version.h" ]] ||
  { say "the wheel holds no cutlass/version.h"; exit 1; }
rm -rf "$DEST/include"
mkdir -p "$DEST"
mv "$TMP/unpacked/cutlass_library/source/include" "$DEST/include"
touch "$DEST/include/.wheel-$VERSION"
say "CUTLASS $VERSION headers in $DEST/include (KHARNESS_CUTLASS=$DEST/include)"
