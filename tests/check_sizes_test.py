#!/usr/bin/env python3
"""Runs scripts/check-sizes.py on tests/fixtures/sizes with small limits and checks its report.

The fixture holds braces in comments, strings, character and raw string literals, a constructor
with brace-initialized members, an operator() defined outside its class (counted in the class's
length), a lambda at namespace scope and an attribute's parentheses before a function's name: a
scanner that miscounts any of them reports other names or lengths than the ones expected here.

    tests/check_sizes_test.py [ROOT]      ROOT: the repository (default: this script's parent)
"""
import pathlib
import subprocess
import sys


def run(root, *args):
    fixture = root / "tests/fixtures/sizes"
    p = subprocess.run([sys.executable, str(root / "scripts/check-sizes.py"), str(fixture), *args],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.splitlines()


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else __file__).resolve()
    if root.is_file():
        root = root.parent.parent
    allow = root / "tests/fixtures/sizes/allow.txt"
    failures = []

    rc, lines = run(root, "--list", "--max-function", "5", "--max-class", "12", "--allow", str(allow))
    want = [
        "    6 function demo::braces_in_literals  src/stage/sample.cpp:15",
        "    3 function demo::raw_text  src/stage/sample.cpp:23",
        "   17 class    demo::Holder  src/stage/sample.cpp:30 (14 in its body, 3 in member functions "
        "defined outside it)",
        "    5 function demo::Holder::Holder  src/stage/sample.cpp:32",
        "    1 function demo::Holder::value  src/stage/sample.cpp:37",
        "    7 function demo::twice  src/stage/sample.cpp:46",
        "    3 function demo::Holder<int>::operator()  src/stage/sample.cpp:54",
        "    3 function demo::attributed  src/stage/sample.cpp:60",
        "src/stage/sample.cpp:15: function demo::braces_in_literals is 6 lines (limit 5)",
        "src/stage/sample.cpp:46: function demo::twice is 7 lines (limit 5)",
        f"{allow}:3: demo::gone is allowed but is no longer a function over 5 lines or a class "
        "over 12: remove the entry",
    ]
    if rc != 1 or lines[:len(want)] != want:
        failures.append(("small limits, fixture allow-list", rc, lines, want))

    # At the fixture's own lengths nothing is too long, and an empty allow-list is not stale.
    rc, lines = run(root, "--max-function", "7", "--max-class", "17", "--allow", "/dev/null")
    if rc != 0:
        failures.append(("limits at the longest lengths", rc, lines, []))

    for what, rc, got, want in failures:
        print(f"check-sizes on the fixture ({what}): exit {rc}")
        print("  got:\n    " + "\n    ".join(got))
        print("  want:\n    " + "\n    ".join(want))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
