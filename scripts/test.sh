#!/usr/bin/env bash
# Builds kharness (through scripts/setup.sh), lints (scripts/lint.sh: formatting, clang-tidy on
# the files changed against main, function and class sizes) and runs every test registered with
# CTest.
# Tests that need a GPU skip cleanly where there is none.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
# The lint step (scripts/lint.sh): a file clang-format would change, a clang-tidy finding in a
# file changed against main, or a function or class over the size limits fails the run.
"$ROOT/scripts/lint.sh"
# A fresh archive: verdicts cached by an earlier run must not stand in for this run's tests.
KHARNESS_ARCHIVE="$(mktemp -d)"
export KHARNESS_ARCHIVE
trap 'rm -rf "$KHARNESS_ARCHIVE"' EXIT
ctest --test-dir "$ROOT/build" --output-on-failure -j2 "$@"
