#!/usr/bin/env python3
"""Checks every #include "..." of src/ against the layer table (src/layers.txt), and that docs/ARCHITECTURE.md
shows that table as it is. Usage: check_layers.py [repo root]. Exit 1 with one line per crossing.

An include names a folder: "x/y/z.h" a private header of src/x/y (the longest folder of the table that starts
the path), "ringguard/x/z.h" a public header of include/ringguard/x. A file may include its own layer's headers,
core's, and those of the layers its line lists: their public headers, and their private ones where the name
carries a +. Includes of other roots (<...>, or "..." of a file beside the includer) are not checked."""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(path):
    layers, exceptions, table_lines = {}, [], []
    for raw in open(path, encoding="utf-8"):
        line = raw.rstrip("\n")
        if line.startswith("exception:"):
            file_part, why = line[len("exception:"):].split(":", 1)
            src, inc = [x.strip() for x in file_part.split("->")]
            exceptions.append((src, inc, why.strip()))
            table_lines.append(line)
            continue
        if not line.strip() or line.startswith("#"):
            continue
        name, rest = line.split(":", 1)
        folders, public, deps = [x.split() for x in rest.split("|")]
        layers[name.strip()] = {
            "folders": folders,
            "public": public,
            "deps": {d.rstrip("+"): d.endswith("+") for d in deps},
        }
        table_lines.append(line)
    return layers, exceptions, table_lines


def check(root):
    """The problems of the tree at `root`, one line each."""
    layers, exceptions, table_lines = read_table(os.path.join(root, "src", "layers.txt"))
    private = sorted(((f, n) for n, l in layers.items() for f in l["folders"]), key=lambda x: -len(x[0]))
    public = {f: n for n, l in layers.items() for f in l["public"]}

    def private_layer(path):  # "transport/shm/x.h" -> the layer of the longest matching folder
        for folder, name in private:
            if path == folder or path.startswith(folder + "/"):
                return name
        return None

    problems = []
    src = os.path.join(root, "src")
    for dirpath, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".h", ".cc", ".cu", ".cuh", ".in")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            mine = private_layer(os.path.relpath(path, src))
            if mine is None:
                problems.append(f"{rel}: in no layer of src/layers.txt")
                continue
            for number, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                parts = inc.split("/")
                if parts[0] == "ringguard" and len(parts) > 2:
                    theirs, is_private = public.get(parts[1]), False
                elif len(parts) > 1:
                    theirs, is_private = private_layer(inc), True
                else:
                    continue  # a file beside the includer
                if theirs is None:
                    problems.append(f"{rel}:{number}: #include \"{inc}\": in no layer of src/layers.txt")
                    continue
                deps = layers[mine]["deps"]
                allowed = theirs in (mine, "core") or (theirs in deps and (deps[theirs] or not is_private))
                if allowed or any(rel == s and inc.startswith(i) for s, i, _ in exceptions):
                    continue
                kind = "private header" if is_private else "public header"
                problems.append(f"{rel}:{number}: #include \"{inc}\": the {mine} layer may not include the {theirs} "
                                f"layer's {kind} (src/layers.txt)")
    for s, i, why in exceptions:
        if not os.path.exists(os.path.join(root, s)) or not any(
                INCLUDE.match(l) and INCLUDE.match(l).group(1).startswith(i)
                for l in open(os.path.join(root, s), encoding="utf-8", errors="replace")):
            problems.append(f"src/layers.txt: the exception {s} -> {i} no longer applies: remove it")

    docs = open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    block = "\n".join(table_lines)
    if block not in docs:
        problems.append("docs/ARCHITECTURE.md: its layer table is not src/layers.txt's table lines "
                        "(copy them into the fenced block under \"The layer table\")")
    return problems


def self_test():
    """The check finds what it must in a small tree: an upward include, a private header of a layer listed
    without +, a stale exception, a table the docs do not show; and passes the same tree once fixed."""
    import tempfile

    def tree(files):
        root = tempfile.mkdtemp(prefix="check_layers.")
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        return root

    table = ("core: core | core |\nalgorithms: algorithms | | core\nruntime: runtime | runtime | core algorithms\n"
             "exception: src/runtime/old.cc -> algorithms/gone.h: none\n")
    good = {"src/layers.txt": table, "docs/ARCHITECTURE.md": "```\n" + table + "```\n",
            "src/core/a.cc": '#include "core/b.h"\n', "src/algorithms/x.cc": '#include "core/b.h"\n',
            "src/runtime/y.cc": '#include "ringguard/runtime/c.h"\n', "src/runtime/old.cc": ""}
    bad = dict(good)
    bad["src/core/a.cc"] = '#include "algorithms/x.h"\n'         # upward
    bad["src/runtime/y.cc"] = '#include "algorithms/private.h"\n'  # private, listed without +
    bad["docs/ARCHITECTURE.md"] = "no table\n"
    found = check(tree(bad))
    want = ["src/core/a.cc:1: #include \"algorithms/x.h\": the core layer may not include the algorithms",
            "src/runtime/y.cc:1: #include \"algorithms/private.h\": the runtime layer may not include the "
            "algorithms layer's private header",
            "the exception src/runtime/old.cc -> algorithms/gone.h no longer applies",
            "docs/ARCHITECTURE.md: its layer table is not"]
    missing = [w for w in want if not any(w in p for p in found)]
    good["src/runtime/old.cc"] = '#include "algorithms/gone.h"\n'
    clean = check(tree(good))
    if missing or clean or len(found) != len(want):
        print("check_layers self-test FAILED:", {"missing": missing, "found": found, "clean tree": clean})
        return 1
    print("check_layers self-test: every planted crossing found, the clean tree passes")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    problems = check(root)
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} problem(s)" if problems else "check_layers: every include within the layer table")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
