#!/usr/bin/env python3
"""Lists the functions and classes of src/ that have grown too long to read in one sitting.

A function over 150 lines or a class (struct, union) over 400 lines is reported, with its file,
line and length, unless scripts/data/size-allow.txt names it with the reason it is kept whole.
A class's length counts its body and its member functions defined outside it. The headers of
include/kharness/ are read too: their classes are implemented in src/.
An allow-list entry that no longer matches a long function or class is reported too, so that
the list only holds what it must. Exits 1 when it reports anything.

It reads the C++ and CUDA sources (.cpp, .hpp, .cu, .cuh) with a small scanner, not a compiler:
comments, string, character and raw string literals and preprocessor lines are blanked first, so
braces inside them do not count; then each brace at namespace or class scope is classified from
the text before it (a class head, a function head, or an initializer). A function is measured
from the line of its name to its closing brace; a class body from its head to its closing brace.
Lambdas and local classes count as part of the function that holds them.

    scripts/check-sizes.py [ROOT] [--allow FILE] [--max-function N] [--max-class N]

ROOT is the repository (default: this script's parent); --allow defaults to
ROOT/scripts/data/size-allow.txt. Each allow-list line is a qualified name (as reported, e.g.
kharness::verify::Evaluator) followed by the reason; lines starting with # are comments.
"""
import argparse
import pathlib
import re
import sys

SOURCES = (".cpp", ".hpp", ".cu", ".cuh")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RAW_PREFIXES = ("R", "u8R", "uR", "UR", "LR")
# Words that may follow the parameter list of a function head before its body.
TRAILING = {"const", "volatile", "noexcept", "override", "final", "mutable", "constexpr", "try", "&", "&&"}
CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "return"}


def blank(text):
    """Returns text with comments, literals and preprocessor lines replaced by spaces.

    Newlines are kept, so line numbers stay right. A string literal becomes "" (its quotes kept
    and its content dropped), so a head like extern "C" still reads as one."""
    out = []
    i, n = 0, len(text)
    line_start = True  # only blanks since the last newline: a # here starts a directive
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            i += 1
            line_start = True
            continue
        if line_start and c == "#":
            # A directive runs to the end of the line, longer where a line ends in a backslash.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                if text.startswith("/*", i):  # a block comment may span lines inside a directive
                    end = text.find("*/", i + 2)
                    end = n if end < 0 else end + 2
                    out.append(re.sub(r"[^\n]", " ", text[i:end]))
                    i = end
                    continue
                out.append(" ")
                i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if c == '"':
            # The identifier just before the quote tells a raw string (R"delim( ... )delim").
            j = i
            while j > 0 and (text[j - 1].isalnum() or text[j - 1] == "_"):
                j -= 1
            prefix = text[j:i]
            if prefix in RAW_PREFIXES:
                open_paren = text.find("(", i + 1)
                delim = text[i + 1:open_paren]
                close = text.find(")" + delim + '"', open_paren + 1)
                end = n if close < 0 else close + len(delim) + 2
                out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:end - 1]) + '"')
                i = end
                continue
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append('""' + " " * (min(j, n - 1) - i - 1))
            i = j + 1
            continue
        if c == "'":
            # A quote after a number is a digit separator (1'000'000), else a character literal.
            j = i
            while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_."):
                j -= 1
            if j < i and text[j].isdigit():
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) - i + 1))
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def matching(text, i, open_c, close_c):
    """Index of the bracket that closes the one at i (len(text) when none does)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_c:
            depth += 1
        elif text[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    return len(text)


def strip_templates(head):
    """Drops template<...> prefixes, whose parameters may say class or typename."""
    while True:
        m = re.search(r"\btemplate\s*<", head)
        if not m:
            return head
        j = matching(head, m.end() - 1, "<", ">")
        head = head[:m.start()] + " " + head[j + 1:]


def name_before(head, i):
    """The (possibly qualified) name that ends just before index i, operators included."""
    m = re.search(r"(operator\s*(\(\)|\[\]|[^\s\w(]+|\w[\w\s:<>*&]*?)|~?[A-Za-z_]\w*(<[^()]*>)?)\s*$",
                  head[:i])
    if not m:
        return None
    start = m.start()
    # Qualifiers written before it: Foo::bar, ns::Foo<T>::bar.
    while True:
        q = re.search(r"([A-Za-z_]\w*(<[^()]*?>)?)\s*::\s*$", head[:start])
        if not q:
            break
        start = q.start()
    name = re.sub(r"\s+", "", head[start:m.end()])
    if m.group(1):  # operator: keep the spelling readable
        name = re.sub(r"operator", "operator", name)
    return name, start


def classify(head):
    """What a brace at namespace or class scope opens, from the text since the last statement.

    Returns (kind, name, offset of the name in head) where kind is namespace, class, function,
    open (an initializer or enum: its braces belong to the head) or body (the body of something
    that is not measured)."""
    h = strip_templates(head)
    h = re.sub(r"^\s*((public|private|protected)\s*:\s*)+", lambda m: " " * len(m.group(0)), h)
    flat = h.strip()
    if re.match(r"^(inline\s+)?namespace\b", flat) or re.match(r'^extern\s*""\s*$', flat):
        m = re.match(r"^\s*(inline\s+)?namespace\s*([\w:]*)", h)
        return "namespace", (m.group(2) if m else ""), 0
    if re.search(r"\benum\b", flat):
        return "open", None, 0
    # Attributes whose parentheses are not a parameter list.
    h = re.sub(r"\b(alignas|__launch_bounds__|__attribute__|__declspec)\s*\([^()]*(\([^()]*\)[^()]*)*\)",
               lambda m: " " * len(m.group(0)), h)
    paren = h.find("(")
    if re.search(r"\boperator\s*$", h[:paren]):  # operator()(...): the second ( opens the parameters
        paren = h.find("(", h.find(")", paren) + 1)
    m = re.search(r"\b(class|struct|union)\b", h)
    if m and (paren < 0 or m.start() < paren) and "=" not in h[:m.start()]:
        # class Foo final : public Base<T> {  (the name is the identifier after the keyword,
        # skipping attributes such as [[nodiscard]] and export macros in capitals)
        rest = re.sub(r"\[\[.*?\]\]", " ", h[m.end():])
        rest = re.split(r"(?<!:):(?!:)", rest)[0]  # up to the base list
        names = [w for w in re.findall(r"[A-Za-z_][\w:]*", rest) if w != "final"]
        names = [w for w in names if not w.isupper()] or names
        return "class", (names[0] if names else ""), m.start()
    if paren < 0:
        return "open", None, 0
    # A lambda assigned at namespace or class scope: measured as a function named after the
    # variable.
    eq = re.search(r"(?<![=!<>])=(?!=)", h[:paren])
    if eq and "operator" not in h[:eq.start()]:
        if re.match(r"\s*\[", h[eq.end():]):
            var = re.search(r"([A-Za-z_]\w*)\s*$", h[:eq.start()])
            return "function", (var.group(1) if var else "lambda"), (var.start() if var else 0)
        return "open", None, 0
    found = name_before(h, paren)
    if not found:
        return "open", None, 0
    name, start = found
    if name in CONTROL:
        return "body", None, 0
    close = matching(h, paren, "(", ")")
    rest = h[close + 1:].strip()
    # noexcept(...), requires ..., -> trailing return type, and qualifiers: still the head.
    rest_plain = re.sub(r"noexcept\s*\(.*?\)", "noexcept", rest)
    if rest_plain.startswith(":") and not rest_plain.startswith("::"):
        # A constructor's member initializers: the body comes after a closed ) or }, while a
        # brace after a member's name is that member's initializer.
        if rest_plain.endswith(")") or rest_plain.endswith("}"):
            return "function", name, start
        return "open", None, 0
    words = rest_plain.replace("&&", " && ").replace("&", " & ").split()
    if "->" in rest_plain or "requires" in words or all(w in TRAILING for w in words):
        return "function", name, start
    return "open", None, 0


def scan(path, rel):
    """Yields (kind, qualified name, first line, line count, file, in a class body) for each class
    and function."""
    text = blank(path.read_text(errors="replace"))
    line_of = []
    line = 1
    for c in text:
        line_of.append(line)
        if c == "\n":
            line += 1
    scopes = []  # (kind, name) of the open namespace and class braces
    head_start = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in ";}":
            if c == "}" and scopes:
                scopes.pop()
            head_start = i + 1
            i += 1
            continue
        if c != "{":
            i += 1
            continue
        head = text[head_start:i]
        kind, name, offset = classify(head)
        if kind == "open":  # an initializer's braces are part of the statement
            i = matching(text, i, "{", "}") + 1
            continue
        qual = "::".join(s for _, s in scopes if s)
        full = (qual + "::" if qual and name else "") + (name or "")
        first = line_of[head_start + offset] if head_start + offset < n else line_of[i]
        if kind == "namespace":
            scopes.append(("namespace", "" if name is None else name))
            head_start = i + 1
            i += 1
            continue
        if kind == "class":
            # The class head's line: the keyword, not a template line above it.
            end = matching(text, i, "{", "}")
            first = line_of[min(head_start + len(head) - len(head.lstrip()), n - 1)]
            kw = re.search(r"\b(class|struct|union)\b", head)
            if kw:
                first = line_of[head_start + kw.start()]
            yield "class", full, first, line_of[min(end, n - 1)] - first + 1, rel, False
            scopes.append(("class", name))
            head_start = i + 1
            i += 1
            continue
        end = matching(text, i, "{", "}")
        if kind == "function":
            m = re.search(re.escape(name.split("::")[-1].split("<")[0]), head) if name else None
            if m:
                first = line_of[head_start + m.start()]
            in_class = bool(scopes) and scopes[-1][0] == "class"
            yield "function", full, first, line_of[min(end, n - 1)] - first + 1, rel, in_class
        i = end + 1
        head_start = i


def load_allow(path):
    allow = {}
    if not path.exists():
        return allow
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        parts = s.split(None, 1)
        if len(parts) < 2:
            sys.exit(f"{path}:{number}: an entry needs a name and the reason it is kept: {s}")
        allow[parts[0]] = (number, parts[1])
    return allow


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", nargs="?", default=str(pathlib.Path(__file__).resolve().parent.parent))
    ap.add_argument("--allow")
    ap.add_argument("--max-function", type=int, default=150)
    ap.add_argument("--max-class", type=int, default=400)
    ap.add_argument("--list", action="store_true", help="print every function and class with its length")
    args = ap.parse_args()
    root = pathlib.Path(args.root).resolve()
    allow_path = pathlib.Path(args.allow) if args.allow else root / "scripts/data/size-allow.txt"
    allow = load_allow(allow_path)
    limit = {"function": args.max_function, "class": args.max_class}
    items = []
    # include/kharness/ holds the headers of classes that src/ implements.
    for path in sorted(list((root / "src").rglob("*")) + list((root / "include").rglob("*"))):
        if path.suffix in SOURCES and path.is_file():
            items.extend(scan(path, path.relative_to(root)))
    # A class's length is its body plus its member functions defined outside it (in a .cpp file
    # beside its header, or after its body): moving definitions out of a class does not make it
    # any smaller.
    classes = {}  # name -> [[file, line, body lines, outside lines]]
    for kind, name, first, lines, rel, _ in items:
        if kind == "class":
            classes.setdefault(name, []).append([rel, first, lines, 0])
    for kind, name, first, lines, rel, in_class in items:
        if kind != "function" or in_class or "::" not in name:
            continue
        owner = re.sub(r"<[^<>]*>", "", name.rsplit("::", 1)[0])
        found = classes.get(owner)
        if not found:
            continue
        # The definition of that name in the same file (a class local to a .cpp), else the first.
        match = next((c for c in found if c[0] == rel), found[0])
        match[3] += lines
    long_ones, used = [], set()
    for kind, name, first, lines, rel, _ in items:
        if kind == "class":
            body, outside = next((c[2], c[3]) for c in classes[name] if c[0] == rel and c[1] == first)
            lines = body + outside
            detail = f" ({body} in its body, {outside} in member functions defined outside it)" \
                if outside else ""
        else:
            detail = ""
        if args.list:
            print(f"{lines:5d} {kind:8s} {name}  {rel}:{first}{detail}")
        if lines <= limit[kind]:
            continue
        if name in allow:
            used.add(name)
            continue
        long_ones.append(f"{rel}:{first}: {kind} {name} is {lines} lines{detail} "
                         f"(limit {limit[kind]})")
    stale = [f"{allow_path}:{number}: {name} is allowed but is no longer a function over "
             f"{args.max_function} lines or a class over {args.max_class}: remove the entry"
             for name, (number, _) in sorted(allow.items(), key=lambda kv: kv[1][0]) if name not in used]
    for s in long_ones + stale:
        print(s)
    if long_ones:
        print(f"check-sizes: split the above into named steps, or add them to {allow_path.name} "
              "with the reason they are kept whole")
    if long_ones or stale:
        return 1
    if not args.list:
        print("check-sizes: no function over", args.max_function, "lines and no class over",
              args.max_class, "lines outside the allow-list")
    return 0


if __name__ == "__main__":
    sys.exit(main())
