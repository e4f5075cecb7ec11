#!/usr/bin/env python3
"""The longest C functions of the given folders, and exit 1 when one is longer
than the limit (docs/DESIGN.md, "Style", rule 6: no function over 150 lines in
core/ and app/).

    scripts/func_lengths.py [-n LIMIT] [--top N] [DIR ...]      (default: core app)

A function's length is counted from the line of its name to the line of its
closing brace, both included (blank and comment lines count: they are lines a
reader scrolls through). The scan is a plain one, no preprocessor and no
parser: comments, string and character literals and preprocessor lines (with
their continuations) are blanked; then a '{' at file level whose header (the
text since the previous ';', '}' or preprocessor line) ends with a parameter
list ')' and holds no '=' outside parentheses opens a function body, which ends
at the matching '}'. Functions inside macro definitions are not counted.
Standard library only.
"""
import argparse
import os
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*$")
NOT_NAMES = {"if", "for", "while", "switch", "return", "sizeof", "defined"}


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


def function_name(header):
    """(name, its offset in header) of the function whose header this is, or
    None: the header ends with the ')' of its parameter list, has no '='
    outside parentheses, and the identifier before that list is not a keyword."""
    h = header.rstrip()
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
    m = IDENT.search(h[:k].rstrip())
    if not m or m.group(0) in NOT_NAMES:
        return None
    return m.group(0), m.start()


def functions(path):
    """(name, first line, last line) of every function defined in the file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    code = blank(text)
    found = []
    depth, start, i, n = 0, 0, 0, len(code)
    while i < n:
        c = code[i]
        if depth == 0 and c == ";":
            start = i + 1
        elif c == "{":
            if depth == 0:
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
            depth += 1
        elif c == "}":
            depth = max(depth - 1, 0)
            if depth == 0:
                start = i + 1
        i += 1
    return found


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--limit", type=int, default=150, help="longest allowed (lines)")
    ap.add_argument("--top", type=int, default=10, help="how many of the longest to list")
    ap.add_argument("--root", default=".", help="the folders are relative to this one")
    ap.add_argument("dirs", nargs="*", default=["core", "app"])
    a = ap.parse_args(argv)
    rows = []
    for d in a.dirs:
        folder = os.path.join(a.root, d)
        if not os.path.isdir(folder):
            print(f"func_lengths: {folder}: no such folder", file=sys.stderr)
            return 2
        for name in sorted(os.listdir(folder)):
            if name.endswith(".c"):
                path = os.path.join(folder, name)
                for fn, first, last in functions(path):
                    rows.append((last - first + 1, f"{d}/{name}:{first}", fn))
    rows.sort(key=lambda r: (-r[0], r[1]))
    for length, where, fn in rows[: a.top]:
        print(f"{length}\t{where}\t{fn}")
    over = [r for r in rows if r[0] > a.limit]
    for length, where, fn in over:
        print(f"func_lengths: {where}: {fn} is {length} lines, more than {a.limit}", file=sys.stderr)
    print(f"{len(rows)} functions in {', '.join(a.dirs)}; {len(over)} over {a.limit} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
