#!/usr/bin/env bash
# Downloads FlashInfer-Bench 0.1.2 and its small pure dependencies as wheels for the GPU machine's
# Python (3.12, manylinux x86_64) into a folder of the working tree that git ignores, so that
# scripts/fib-peer.sh can install them there without network (../shared/fib/PEER.md).
#
#   scripts/fetch-fib-wheels.sh [DIR]     DIR defaults to .fib-wheels/ at the repository root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/.fib-wheels}"
mkdir -p "$DIR"
PIP=(python3 -m pip)
"${PIP[@]}" --version >/dev/null 2>&1 || PIP=(pip3)
"${PIP[@]}" download --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --dest "$DIR" \
  flashinfer-bench==0.1.2 pydantic==2.11.10 pydantic-core==2.33.2 annotated-types==0.7.0 \
  typing-inspection==0.4.2 docstring-parser==0.17.0 apache-tvm-ffi==0.1.15.post2
ls -1 "$DIR"/*.whl
echo "fetch-fib-wheels: $(ls -1 "$DIR"/*.whl | wc -l) wheels in $DIR (carry this folder to the GPU machine)"
