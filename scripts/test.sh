#!/usr/bin/env bash
# Builds kharness (through scripts/setup.sh) and runs every test registered with CTest.
# Tests that need a GPU skip cleanly where there is none.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
exec ctest --test-dir "$ROOT/build" --output-on-failure -j2 "$@"
