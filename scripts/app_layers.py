#!/usr/bin/env python3
"""The layers of app/: exit 1 when a file of app/ includes or calls a file of
its own layer or above, or is not in the layer table (docs/DESIGN.md, "Layout
and dependency direction", the table whose header row starts "| layer |").

    scripts/app_layers.py [--root DIR] [--demote STEM]

A file's module is its stem: X.c and X.h are one module. An edge goes from a
file to the module of every app header it includes ("X.h") and to the module
of the .c file that defines a function it names, when that function is
declared in an app header (static helpers are private to their file). The
scan blanks comments, literals and preprocessor lines as
scripts/func_lengths.py does; a name counts where it stands as a whole word.
An edge is allowed only when it points to a lower layer (or inside its own
module). --demote STEM puts that module below every layer for the run, so that
a test can check that the scan finds back-edges at all. Standard library only.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import func_lengths  # noqa: E402  (the blanking and the function scan)

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
DECLARED = re.compile(r"\b([A-Za-z_][A-Za-z_0-9]*)\s*\(")


def layer_table(design):
    """{stem: layer} from the table of docs/DESIGN.md whose header row starts
    '| layer |' (first cell the layer number, second the stems, comma-separated)."""
    layers, in_table = {}, False
    with open(design, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("| layer |"):
                in_table = True
                continue
            if not in_table:
                continue
            if not line.startswith("|"):
                break
            if not cells[0].isdigit():
                continue  # the |---| row
            for stem in cells[1].split(","):
                if stem.strip():
                    layers[stem.strip()] = int(cells[0])
    return layers


def stem(name):
    return os.path.splitext(name)[0]


def scan(app):
    """(files, includes, exported): files {name: blanked text}; includes
    {name: [(line, header)]}; exported {function: defining .c file} for the
    functions an app header declares and one .c file defines."""
    files, includes = {}, {}
    for name in sorted(os.listdir(app)):
        if not name.endswith((".c", ".h")):
            continue
        with open(os.path.join(app, name), encoding="utf-8", errors="replace") as f:
            text = f.read()
        includes[name] = [(text.count("\n", 0, m.start()) + 1, m.group(1))
                          for m in INCLUDE.finditer(text)]
        files[name] = func_lengths.blank(text)
    declared = set()
    for name, code in files.items():
        if name.endswith(".h"):
            declared.update(DECLARED.findall(code))
    exported = {}
    for name in files:
        if name.endswith(".c"):
            for fn, _, _ in func_lengths.functions(os.path.join(app, name)):
                if fn in declared:
                    exported[fn] = name
    return files, includes, exported


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=".", help="the repository's root")
    ap.add_argument("--demote", help="put this module below every layer (a test of the scan)")
    a = ap.parse_args(argv)
    app = os.path.join(a.root, "app")
    design = os.path.join(a.root, "docs/DESIGN.md")
    layers = layer_table(design)
    if not layers:
        print(f"app_layers: {design}: no layer table (a row '| layer | files | ... |')", file=sys.stderr)
        return 2
    if a.demote:
        layers[a.demote] = 0
    files, includes, exported = scan(app)
    bad = []
    for name in files:
        if stem(name) not in layers:
            bad.append(f"app/{name}: not in the layer table of docs/DESIGN.md")
    edges = 0
    for name, code in files.items():
        mine = layers.get(stem(name))
        if mine is None:
            continue
        for line, header in includes[name]:
            if not os.path.exists(os.path.join(app, header)) or stem(header) == stem(name):
                continue  # a header of core/, kernels/, viz/ or the system; its own
            edges += 1
            theirs = layers.get(stem(header), 99)
            if theirs >= mine:
                bad.append(f"app/{name}:{line}: includes {header} (layer {theirs}), "
                           f"not below its own layer {mine}")
        for fn, where in sorted(exported.items()):
            if stem(where) == stem(name):
                continue
            m = re.search(r"\b%s\b" % re.escape(fn), code)
            if not m:
                continue
            edges += 1
            theirs = layers.get(stem(where), 99)
            if theirs >= mine:
                line = code.count("\n", 0, m.start()) + 1
                bad.append(f"app/{name}:{line}: calls {fn} (app/{where}, layer {theirs}), "
                           f"not below its own layer {mine}")
    for b in bad:
        print(f"app_layers: {b}", file=sys.stderr)
    print(f"{len(files)} files of app/ in {len(set(layers.values()))} layers, {edges} edges; "
          f"{len(bad)} against the layers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
