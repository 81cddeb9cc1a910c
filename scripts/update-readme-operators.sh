#!/usr/bin/env bash
# Regenerates README.md's operator list (between the operators:begin and operators:end markers)
# from the shipped operators/ folder: `kharness operators list --markdown`.
# tests/readme_operators_test.cpp fails when the README and operators/ disagree.
#
#   scripts/update-readme-operators.sh [KHARNESS_BINARY]     (default build/kharness)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KHARNESS="${1:-build/kharness}"
[[ -x "$KHARNESS" ]] || { echo "update-readme-operators: no kharness binary at '$KHARNESS'" >&2; exit 2; }
LIST="$(mktemp)"
trap 'rm -f "$LIST"' EXIT
KHARNESS_HOME="$ROOT" "$KHARNESS" operators list --markdown >"$LIST"
python3 - "$LIST" <<'PY'
import sys
begin, end = "<!-- operators:begin", "<!-- operators:end -->"
text = open("README.md").read()
i, j = text.find(begin), text.find(end)
if i < 0 or j < i:
    sys.exit("update-readme-operators: README.md has no operators:begin/end markers")
i = text.index("\n", i) + 1
new = text[:i] + open(sys.argv[1]).read() + text[j:]
if new != text:
    open("README.md", "w").write(new)
    print("update-readme-operators: README.md updated")
else:
    print("update-readme-operators: README.md is current")
PY
