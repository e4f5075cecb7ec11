#!/usr/bin/env python3
"""The longest C and CUDA functions of the given folders, and exit 1 when one
is longer than the limit and not on the allow-list (docs/DESIGN.md, "Style",
rule 6: no function over 150 lines in core/, app/, kernels/ and viz/).

    scripts/func_lengths.py [-n LIMIT] [--top N] [--allow FILE] [DIR ...]
                                              (default: core app kernels viz)

Files: .c, .cu and .cuh. A function's length is counted from the line of its
name to the line of its closing brace, both included (blank and comment lines
count: they are lines a reader scrolls through). The scan is a plain one, no
preprocessor and no parser: comments, string and character literals and
preprocessor lines (with their continuations) are blanked; then a '{' at file
level whose header (the text since the previous ';', '{' or '}' or
preprocessor line) ends with a parameter list ')' (C++ qualifiers such as
const after it are dropped) and holds no '=' outside parentheses and template
argument lists opens a function body, which ends at the matching '}'. For
CUDA/C++: a template parameter list ("template <int N = 4>") and the
qualifiers __global__, __device__, __host__, __launch_bounds__(...) are part
of the header, the name is the identifier before the parameter list
("operator()" for a call operator); the bodies of namespaces, extern "C"
blocks, structs and classes are scanned like the file level, so that their
functions and member functions count; a lambda inside a function is part of
that function. Functions inside macro definitions are not counted.

The allow-list (--allow, default scripts/func_lengths_allow.txt beside this
script) names the functions that may stay longer, one per line:
FUNCTION, FILE (relative to the root) and the reason, separated by tabs or
runs of two or more spaces; '#' starts a comment line. An entry whose
function is not over the limit (cut, renamed or gone) is an error too, so the
list only ever holds what is still long. Standard library only.
"""
import argparse
import os
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*$")
NOT_NAMES = {"if", "for", "while", "switch", "return", "sizeof", "defined", "catch"}
SUFFIXES = re.compile(r"(\s*\b(const|noexcept|override|final|volatile)\b)+\s*$")
OPERATOR = re.compile(r"\boperator\s*(\(\s*\)|[^\sA-Za-z_0-9(][^\s(]*)\s*$")
# blocks whose contents are scanned like the file level: namespaces, extern "C"
# (the literal is blanked), structs, classes and unions, templated or not
SCOPE = re.compile(r"^\s*(template\s*<.*>\s*)?(namespace\b[^()=]*|extern\s*"
                   r"|(typedef\s+)?(struct|class|union)\b[^()=]*)$", re.S)
EXTENSIONS = (".c", ".cu", ".cuh")


def blank(text):
    """text with comments, literals and preprocessor lines turned into spaces
    (newlines kept, so that offsets keep their line numbers)."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":  # a preprocessor line and its continuations
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def drop_templates(h):
    """h with every template argument list <...> (after 'template' or an
    identifier) replaced by spaces, so that '=' defaults inside them do not
    count; comparison operators stay (they follow no identifier directly)."""
    out, i = list(h), 0
    for m in re.finditer(r"(\btemplate|[A-Za-z_0-9])\s*<", h):
        j = m.end() - 1
        if j < i:
            continue
        depth, k = 0, j
        while k < len(h):
            depth += h[k] == "<"
            depth -= h[k] == ">"
            if depth == 0 or h[k] in ";{}":
                break
            k += 1
        if k < len(h) and h[k] == ">":
            for q in range(j, k + 1):
                out[q] = " "
            i = k + 1
    return "".join(out)


def function_name(header):
    """(name, its offset in header) of the function whose header this is, or
    None: the header ends with the ')' of its parameter list (after dropping
    C++ qualifiers), has no '=' outside parentheses and template lists, and
    the identifier before that list is not a keyword."""
    h = drop_templates(header.rstrip())
    h = SUFFIXES.sub("", h)
    if not h.endswith(")"):
        return None
    depth, k = 0, len(h) - 1
    while k >= 0:  # back to the '(' that opens the parameter list
        if h[k] == ")":
            depth += 1
        elif h[k] == "(":
            depth -= 1
            if depth == 0:
                break
        k -= 1
    if k < 0:
        return None
    depth = 0
    for ch in h[:k]:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "=" and depth == 0:
            return None
    before = h[:k].rstrip()
    op = OPERATOR.search(before)
    if op:
        return "operator" + re.sub(r"\s+", "", op.group(1)), op.start()
    m = IDENT.search(before)
    if not m or m.group(0) in NOT_NAMES:
        return None
    return m.group(0), m.start()


def functions(path):
    """(name, first line, last line) of every function defined in the file,
    at file level or inside namespaces, extern "C" blocks, structs and classes."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    code = blank(text)
    found = []
    scopes = []  # depths at which a transparent scope (namespace, struct, ...) was opened
    depth, start, i, n = 0, 0, 0, len(code)
    while i < n:
        c = code[i]
        level = len(scopes)  # the depth that counts as file level here
        if depth == level and c == ";":
            start = i + 1
        elif c == "{":
            if depth == level:
                header = code[start:i]
                named = function_name(header)
                if named:
                    name, at = named
                    first = code.count("\n", 0, start + at) + 1
                    close, d = i, 0
                    while close < n:
                        d += code[close] == "{"
                        d -= code[close] == "}"
                        if d == 0:
                            break
                        close += 1
                    found.append((name, first, code.count("\n", 0, close) + 1))
                    i, start = close + 1, close + 1
                    continue
                if SCOPE.match(header):
                    scopes.append(depth)
                    depth += 1
                    start = i + 1
                    i += 1
                    continue
            depth += 1
        elif c == "}":
            depth = max(depth - 1, 0)
            if scopes and depth == scopes[-1]:
                scopes.pop()
                start = i + 1
            elif depth == len(scopes):
                start = i + 1
        i += 1
    return found


def read_allow(path):
    """{(file, function): reason} of the allow-list; (None, message) when a
    line is malformed."""
    allow = {}
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            cells = [c.strip() for c in re.split(r"\t+| {2,}", line.strip())]
            if len(cells) < 3 or not all(cells[:3]):
                return None, f"{path}:{no}: expected FUNCTION, FILE and a reason"
            allow[(cells[1], cells[0])] = " ".join(cells[2:])
    return allow, None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--limit", type=int, default=150, help="longest allowed (lines)")
    ap.add_argument("--top", type=int, default=10, help="how many of the longest to list")
    ap.add_argument("--root", default=".", help="the folders are relative to this one")
    ap.add_argument("--allow", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "func_lengths_allow.txt"),
                    help="the allow-list ('' for none)")
    ap.add_argument("dirs", nargs="*", default=["core", "app", "kernels", "viz"])
    a = ap.parse_args(argv)
    allow = {}
    if a.allow:
        if not os.path.isfile(a.allow):
            print(f"func_lengths: {a.allow}: no such file", file=sys.stderr)
            return 2
        allow, bad = read_allow(a.allow)
        if bad:
            print(f"func_lengths: {bad}", file=sys.stderr)
            return 2
    rows = []
    for d in a.dirs:
        folder = os.path.join(a.root, d)
        if not os.path.isdir(folder):
            print(f"func_lengths: {folder}: no such folder", file=sys.stderr)
            return 2
        for name in sorted(os.listdir(folder)):
            if name.endswith(EXTENSIONS):
                path = os.path.join(folder, name)
                for fn, first, last in functions(path):
                    rows.append((last - first + 1, f"{d}/{name}", first, fn))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    for length, f, first, fn in rows[: a.top]:
        print(f"{length}\t{f}:{first}\t{fn}")
    over = [r for r in rows if r[0] > a.limit]
    failed, allowed = 0, set()
    for length, f, first, fn in over:
        if (f, fn) in allow:
            allowed.add((f, fn))
            print(f"allowed: {f}:{first}: {fn} is {length} lines: {allow[(f, fn)]}")
            continue
        failed += 1
        print(f"func_lengths: {f}:{first}: {fn} is {length} lines, more than {a.limit}", file=sys.stderr)
    scanned = set(a.dirs)
    for f, fn in sorted(set(allow) - allowed):
        if f.split("/")[0] in scanned:
            failed += 1
            print(f"func_lengths: {a.allow}: {fn} in {f} is on the allow-list but not over "
                  f"{a.limit} lines (or gone): remove its line", file=sys.stderr)
    print(f"{len(rows)} functions in {', '.join(a.dirs)}; {len(over)} over {a.limit} lines, "
          f"{len(allowed)} of them allowed; {failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
