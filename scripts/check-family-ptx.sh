#!/usr/bin/env bash
# The kernels of operators/_families/ compile to the same PTX as at an earlier commit: for every
# seed, baseline and reference whose file changed since REV (or that includes a _families/_shared/
# file), the file as REV had it and as kharness loads it now (its _shared text inlined) are each
# compiled by `kharness compile` (NVRTC, no GPU needed) and their PTX compared without line
# information (.loc and .file lines) and comments, each compiled under its own file name (NVRTC
# names internal symbols after it). One line per file: SAME or DIFF; exit 1 when any differs. For
# a refactoring that must not change a kernel (one source per kernel).
#
#   scripts/check-family-ptx.sh [REV] [KHARNESS_BINARY]
#       REV defaults to HEAD, KHARNESS_BINARY to build/kharness; ARCH (default sm_90a).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
REV="${1:-HEAD}"
KHARNESS="${2:-build/kharness}"
ARCH="${ARCH:-sm_90a}"
[[ -x "$KHARNESS" ]] || { echo "check-family-ptx: no kharness binary at '$KHARNESS'" >&2; exit 2; }
git rev-parse --verify --quiet "$REV^{commit}" >/dev/null ||
  { echo "check-family-ptx: '$REV' is not a commit" >&2; exit 2; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# PTX without what depends on file names and line numbers.
ptx_of() {  # FILE OUTDIR
  "$KHARNESS" compile "$1" --arch "$ARCH" --no-cache --out "$2" >"$2.log" 2>&1 || return 1
  grep -v -E '^\s*(\.loc|\.file|//)' "$2/kernel.ptx" | sed -e 's/[[:space:]]*$//' >"$2.ptx"
}

same=0 diff=0 n=0
while IFS= read -r file; do
  n=$((n + 1))
  if ! git cat-file -e "$REV:$file" 2>/dev/null; then
    printf '%-70s NEW (not in %s)\n' "$file" "$REV"
    continue
  fi
  mkdir -p "$TMP/$n/old"
  git show "$REV:$file" >"$TMP/$n/old/$(basename "$file")"
  if ! ptx_of "$TMP/$n/old/$(basename "$file")" "$TMP/$n/before"; then
    printf '%-70s ERROR before: %s\n' "$file" "$(tail -n 1 "$TMP/$n/before.log")"
    diff=$((diff + 1)); continue
  fi
  if ! ptx_of "$file" "$TMP/$n/after"; then
    printf '%-70s ERROR after: %s\n' "$file" "$(tail -n 1 "$TMP/$n/after.log")"
    diff=$((diff + 1)); continue
  fi
  lines=$(wc -l <"$TMP/$n/after.ptx")
  if cmp -s "$TMP/$n/before.ptx" "$TMP/$n/after.ptx"; then
    printf '%-70s SAME (%s PTX lines)\n' "$file" "$lines"
    same=$((same + 1))
  else
    printf '%-70s DIFF (%s lines differ)\n' "$file" \
      "$(diff "$TMP/$n/before.ptx" "$TMP/$n/after.ptx" | grep -c '^[<>]')"
    diff=$((diff + 1))
  fi
done < <({
  git diff --name-only "$REV" -- operators/_families
  git ls-files --others --exclude-standard -- operators/_families
  grep -rl --include='*.cu' '_shared/' operators/_families 2>/dev/null
} | grep -E '/(seed[^/]*\.cu|reference\.cu|baseline/[^/]*\.cu)$' | grep -v '/_shared/' | sort -u |
  while IFS= read -r f; do [[ -f "$f" ]] && echo "$f"; done)
echo "check-family-ptx: $same SAME, $diff DIFF or ERROR (against $REV, $ARCH)"
((diff == 0))
