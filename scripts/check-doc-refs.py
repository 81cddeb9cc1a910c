#!/usr/bin/env python3
"""Checks that references to the design document point at something that exists.

Comments explain a rule once, in docs/, and point there with a page and a section anchor
(`docs/timing.md#cold-l2`). This script fails when:
  - a file refers to the old design contract by section number (DESIGN, a space and a section
    sign, in any case) or by the name DESIGN.md, which the repository does not contain;
  - a file names a docs/ page that does not exist, or an anchor that no heading of that page makes;
  - a link inside docs/ (`[text](page.md#anchor)`, `[text](#anchor)`) points at a missing page or
    anchor;
  - a folder of src/ has no heading of its own name in docs/layout.md, so that a new stage cannot
    arrive without the paragraph that tells a newcomer what it is.
Anchors are made from headings as GitHub makes them: lower case, punctuation dropped, spaces to
hyphens, and -1, -2, ... appended to repeats.

    scripts/check-doc-refs.py [ROOT]    ROOT: the repository (default: this script's parent)
    scripts/check-doc-refs.py --self-test   checks the checker on a small made-up repository

Prints one line per broken reference (file:line: what) and exits 1 when there is any.
"""
import pathlib
import re
import sys

# Where references are looked for: code, tests, scripts, build files and the READMEs.
SCANNED_DIRS = ("src", "include", "tests", "scripts", "cmake", "docs", "operators", "skills")
SCANNED_FILES = ("CMakeLists.txt", "README.md")
SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h", ".py", ".sh", ".cmake", ".txt", ".md", ".json",
            ".in"}

# Spelled in two pieces so that this file does not match itself.
OLD_SECTION = re.compile("DESIGN" + r"\s*\u00a7", re.IGNORECASE)
OLD_FILE = re.compile(r"\bDESIGN\.md\b")
DOCS_REF = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md)(#[A-Za-z0-9_-]+)?")
MD_LINK = re.compile(r"\]\(([A-Za-z0-9_./-]*\.md)?(#[A-Za-z0-9_-]+)?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(text):
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page):
    """The anchors the headings of a Markdown page make (code blocks skipped)."""
    found, seen, fenced = set(), {}, False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def scanned(root):
    for name in SCANNED_FILES:
        if (root / name).is_file():
            yield root / name
    for d in SCANNED_DIRS:
        base = root / d
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*")):
            if p.is_file() and not p.is_symlink() and p.suffix in SUFFIXES:
                yield p


def problems_in(root):
    docs = root / "docs"
    me = pathlib.Path(__file__).resolve()
    cache = {}

    def page_anchors(page):
        if page not in cache:
            cache[page] = anchors(page) if page.is_file() else None
        return cache[page]

    problems = []

    def check(where, page, anchor, what):
        found = page_anchors(page)
        if found is None:
            problems.append(f"{where}: {what}: no such page")
        elif anchor and anchor[1:] not in found:
            problems.append(f"{where}: {what}: no heading makes the anchor {anchor}")

    for path in scanned(root):
        if path.resolve() == me:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        rel = path.relative_to(root)
        in_docs = rel.parts[0] == "docs"
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{rel}:{number}"
            if OLD_SECTION.search(line) or OLD_FILE.search(line):
                problems.append(
                    f"{where}: refers to DESIGN sections or DESIGN.md, which this repository "
                    "does not have: point at the docs/ section that explains it")
            for m in DOCS_REF.finditer(line):
                check(where, docs / m.group(1), m.group(2), m.group(0))
            if in_docs and path.suffix == ".md":
                for m in MD_LINK.finditer(line):
                    target, anchor = m.group(1), m.group(2)
                    if not target and not anchor:
                        continue
                    page = (path.parent / target) if target else path
                    check(where, page.resolve(), anchor, (target or "") + (anchor or ""))
    layout = docs / "layout.md"
    if layout.is_file() and (root / "src").is_dir():
        sections = page_anchors(layout)
        for folder in sorted(p.name for p in (root / "src").iterdir() if p.is_dir()):
            if folder not in sections:
                problems.append(f"docs/layout.md: no section for src/{folder}: add a heading "
                                f"'### {folder}' saying what the folder holds")
    return problems


def self_test():
    """The checker on a made-up repository: each kind of broken reference is found, and the
    good ones are not reported."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "src" / "a").mkdir(parents=True)
        (root / "src" / "b").mkdir()
        (root / "docs" / "layout.md").write_text("# Layout\n\n### a\n", encoding="utf-8")
        (root / "docs" / "timing.md").write_text(
            "# Timing\n\n## Cold L2\n\n```\n## not a heading\n```\n\n## Cold L2\n\n"
            "## The `stdrel` criterion: why?\n\nSee [x](#cold-l2-1), [y](pages.md), [z](#nope).\n",
            encoding="utf-8")
        (root / "src" / "a" / "good.cpp").write_text(
            "// docs/timing.md#cold-l2 and docs/timing.md#the-stdrel-criterion-why and "
            "docs/timing.md\n", encoding="utf-8")
        (root / "src" / "a" / "bad.cpp").write_text(
            "// DESIGN " + "\u00a76 says so\n// docs/timing.md#not-a-heading\n"
            "// docs/missing.md#x\n// see DESIGN.md\n", encoding="utf-8")
        # Shared device code of operator families is .cuh, and prose spells the name in lower case.
        (root / "src" / "a" / "shared.cuh").write_text(
            "// fine\n// as the design " + "\u00a75 says\n", encoding="utf-8")
        found = sorted(problems_in(root))
    want = [
        "docs/timing.md:13: pages.md: no such page",
        "docs/timing.md:13: #nope: no heading makes the anchor #nope",
        "src/a/bad.cpp:1: refers to DESIGN",
        "src/a/bad.cpp:2: docs/timing.md#not-a-heading: no heading makes the anchor",
        "src/a/bad.cpp:3: docs/missing.md#x: no such page",
        "src/a/bad.cpp:4: refers to DESIGN",
        "src/a/shared.cuh:2: refers to DESIGN",
        "docs/layout.md: no section for src/b",
    ]
    ok = len(found) == len(want) and all(
        any(p.startswith(w) for p in found) for w in want)
    if not ok:
        print("check-doc-refs self-test: expected problems starting with:")
        print("\n".join("  " + w for w in want))
        print("found:")
        print("\n".join("  " + p for p in found))
        return 1
    print(f"check-doc-refs self-test: {len(want)} broken references found, none else")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else __file__).resolve()
    if root.is_file():
        root = root.parent.parent
    problems = problems_in(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check-doc-refs: {len(problems)} broken reference(s) to the design document")
        return 1
    print("check-doc-refs: every reference to docs/ names a page and heading that exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
