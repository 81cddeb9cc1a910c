#!/usr/bin/env bash
# The lint step of scripts/test.sh, in three parts:
# 1. Formatting: every tracked C++ source and header of src/, include/ and tests/ must be as
#    clang-format (the repository's .clang-format) writes it. Prints the files that are not;
#    `clang-format -i FILE` fixes one.
# 2. clang-tidy (the repository's .clang-tidy) on the C++ files changed against main (the merge
#    base with origin/main, else with main; committed, staged, unstaged and new files alike), so
#    that it stays fast: a changed header is checked through the .cpp file of the same name.
#    It reads the compile commands of the build folder (BUILD_DIR, default build; CMake writes
#    compile_commands.json there).
# 3. References to the design document: comments name docs/ pages and headings that exist
#    (scripts/check-doc-refs.py; also the doc_refs test of CTest).
# 4. Sizes (scripts/check-sizes.py): no function over 150 lines and no class over 400 lines in
#    src/, apart from those scripts/data/size-allow.txt keeps with a reason.
# Exits 1 when any part finds something. Each part skips (with a message) where its tool, a git
# checkout or the compile commands are missing; scripts/setup.sh installs both tools.
#
#   scripts/lint.sh            CLANG_FORMAT and CLANG_TIDY may name the binaries (defaults
#                              clang-format, clang-tidy); LINT_BASE a commit to diff against;
#                              LINT_TIDY=0 skips part 2.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CLANG_FORMAT="${CLANG_FORMAT:-clang-format}"
CLANG_TIDY="${CLANG_TIDY:-clang-tidy}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
status=0

if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "lint: not a git checkout: nothing checked"
  exit 0
fi

# ---- 1. formatting ----
format_check() {
  if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
    echo "lint: $CLANG_FORMAT not found: formatting not checked (install clang-format)"
    return 0
  fi
  # Formatting differs between clang-format releases: the files are kept as the one of CI
  # (Debian 12, clang-format 14) writes them; another release only reports, without failing.
  local want="${LINT_CLANG_FORMAT_MAJOR:-14}" major strict=1
  major="$("$CLANG_FORMAT" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p' | head -n 1)"
  if [[ "$major" != "$want" ]]; then
    echo "lint: $CLANG_FORMAT is version ${major:-unknown}, the files follow version $want:" \
      "differences are reported, not failed"
    strict=0
  fi
  local bad=() f
  while IFS= read -r f; do
    "$CLANG_FORMAT" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done < <(git ls-files 'src/*.cpp' 'src/*.hpp' 'src/*.cu' 'include/*.hpp' 'tests/*.cpp' 'tests/*.hpp')
  if ((${#bad[@]})); then
    echo "lint: ${#bad[@]} file(s) not formatted as .clang-format says (clang-format -i FILE):"
    printf '  %s\n' "${bad[@]}"
    ((strict)) && return 1
    return 0
  fi
  echo "lint: every C++ file is formatted"
}

# ---- 2. clang-tidy on the changed files ----
tidy_check() {
  if [[ "${LINT_TIDY:-1}" == 0 ]]; then
    echo "lint: clang-tidy skipped (LINT_TIDY=0)"
    return 0
  fi
  if ! command -v "$CLANG_TIDY" >/dev/null 2>&1; then
    echo "lint: $CLANG_TIDY not found: clang-tidy not run (install clang-tidy)"
    return 0
  fi
  local db="$BUILD_DIR/compile_commands.json"
  if [[ ! -f "$db" ]]; then
    echo "lint: no $db (configure the build first): clang-tidy not run"
    return 0
  fi
  local base="${LINT_BASE:-}" ref
  if [[ -z "$base" ]]; then
    for ref in origin/main main; do
      if git rev-parse --verify -q "$ref^{commit}" >/dev/null; then
        base="$(git merge-base HEAD "$ref" 2>/dev/null)" && break
      fi
    done
  fi
  if [[ -z "$base" ]]; then
    echo "lint: no main branch to compare with (set LINT_BASE): clang-tidy not run"
    return 0
  fi
  # Changed since the merge base (the working tree included) and new, not ignored, files.
  local changed=() f cpp
  while IFS= read -r f; do
    [[ -f "$f" ]] || continue
    if [[ "$f" == *.hpp ]]; then  # the .cpp beside it, else one of that name under src/
      cpp="${f%.hpp}.cpp"
      [[ -f "$cpp" ]] || cpp="$(git ls-files "src/*/$(basename "$cpp")" | head -n 1)"
      f="$cpp"
    fi
    [[ -n "$f" && -f "$f" ]] && changed+=("$f")
  done < <({ git diff --name-only --diff-filter=ACMR "$base" -- 'src/*.cpp' 'src/*.hpp' \
               'include/*.hpp' 'tests/*.cpp' 'tests/*.hpp'
             git ls-files --others --exclude-standard -- 'src/*.cpp' 'src/*.hpp' 'include/*.hpp' \
               'tests/*.cpp' 'tests/*.hpp'; } | sort -u)
  # Only files the build compiles (the fuzz targets and helpers of other builds are not in it).
  local files=()
  for f in $(printf '%s\n' "${changed[@]}" | sort -u); do
    if grep -qF "\"file\": \"$ROOT/$f\"" "$db"; then
      files+=("$f")
    fi
  done
  if ((${#files[@]} == 0)); then
    echo "lint: no changed C++ file against ${base:0:12}: clang-tidy has nothing to check"
    return 0
  fi
  echo "lint: clang-tidy on ${#files[@]} changed file(s) against ${base:0:12}"
  local out
  out="$(printf '%s\n' "${files[@]}" |
    xargs -P "$(nproc)" -n 1 "$CLANG_TIDY" -p "$BUILD_DIR" --quiet --warnings-as-errors='*' 2>&1)"
  local rc=$?
  # clang-tidy prints "N warnings generated." for warnings it filtered out: not findings.
  out="$(grep -v '^[0-9]* warnings\? \(and [0-9]* errors\? \)\?generated\.$' <<<"$out")"
  if ((rc != 0)); then
    printf '%s\n' "$out"
    echo "lint: clang-tidy found the above (.clang-tidy lists the checks)"
    return 1
  fi
  echo "lint: clang-tidy finds nothing in the changed files"
}

# ---- 3. references to docs/ ----
doc_refs_check() {
  if ! command -v python3 >/dev/null 2>&1; then
    echo "lint: python3 not found: references to docs/ not checked"
    return 0
  fi
  python3 "$ROOT/scripts/check-doc-refs.py" "$ROOT"
}

# ---- 4. function and class sizes ----
size_check() {
  if ! command -v python3 >/dev/null 2>&1; then
    echo "lint: python3 not found: sizes not checked"
    return 0
  fi
  python3 "$ROOT/scripts/check-sizes.py" "$ROOT" | sed 's/^/lint: /'
  return "${PIPESTATUS[0]}"
}

format_check || status=1
tidy_check || status=1
doc_refs_check || status=1
size_check || status=1
exit "$status"
