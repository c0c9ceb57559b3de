#!/usr/bin/env python3
"""Checks every #include "..." of src/ against the layer table (src/layers.txt), and that docs/ARCHITECTURE.md
shows that table as it is. Usage: check_layers.py [repo root]. Exit 1 with one line per crossing.
With --links FILE (what src/CMakeLists.txt writes into the build: "target: linked libraries" per line) it checks
the CMake targets instead: each is a layer (ringguard_<layer>, or the layer a `target:` line of the table names)
and links only the layers that layer may include.

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
        if line.startswith("target:"):  # read by read_targets
            table_lines.append(line)
            continue
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


def read_targets(path):
    """The layer of each CMake target not named after its layer: `target: ringguard_x -> layer: why`."""
    targets = {}
    for line in open(path, encoding="utf-8"):
        if line.startswith("target:"):
            name, layer = [x.strip() for x in line[len("target:"):].split(":", 1)[0].split("->")]
            targets[name] = layer
    return targets


def check_links(root, links_path):
    """The problems of the CMake targets listed in `links_path`, one line each."""
    table = os.path.join(root, "src", "layers.txt")
    layers, _, _ = read_table(table)
    named = read_targets(table)

    def layer_of(target):
        if target.startswith("ringguard::"):
            target = "ringguard_" + target[len("ringguard::"):]
        if target in named:
            return named[target]
        if target.startswith("ringguard_") and target[len("ringguard_"):] in layers:
            return target[len("ringguard_"):]
        return None

    problems = []
    for line in open(links_path, encoding="utf-8"):
        if ":" not in line:
            continue
        target, linked = line.split(":", 1)
        target = target.strip()
        mine = layer_of(target)
        if mine is None:
            problems.append(f"{target}: a target of no layer (name it ringguard_<layer> or add a target: line to "
                            "src/layers.txt)")
            continue
        for dep in linked.split():
            if not dep.startswith(("ringguard_", "ringguard::")):
                continue  # a third-party library
            theirs = layer_of(dep)
            if theirs is None:
                problems.append(f"{target} links {dep}, a target of no layer")
            elif theirs not in (mine, "core") and theirs not in layers[mine]["deps"]:
                problems.append(f"{target} links {dep}: the {mine} layer may not use the {theirs} layer "
                                "(src/layers.txt)")
    return problems


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
    # Targets: one linking upward, one of no layer; a target: line maps ringguard_mpi to the runtime.
    good["src/layers.txt"] = table + "target: ringguard_mpi -> runtime: its MPI parts\n"
    root = tree(good)
    links = os.path.join(root, "links.txt")
    with open(links, "w", encoding="utf-8") as f:
        f.write("ringguard_runtime: ringguard_algorithms ringguard::core Threads::Threads\n"
                "ringguard_mpi: ringguard_runtime MPI::MPI_C\n")
    clean += check_links(root, links)
    with open(links, "a", encoding="utf-8") as f:
        f.write("ringguard_algorithms: ringguard_runtime\nringguard_extra: ringguard_core\n")
    link_found = check_links(root, links)
    link_want = ["ringguard_algorithms links ringguard_runtime: the algorithms layer may not use the runtime layer",
                 "ringguard_extra: a target of no layer"]
    missing += [w for w in link_want if not any(w in p for p in link_found)]
    if missing or clean or len(found) != len(want) or len(link_found) != len(link_want):
        print("check_layers self-test FAILED:",
              {"missing": missing, "found": found + link_found, "clean tree": clean})
        return 1
    print("check_layers self-test: every planted crossing found, the clean tree passes")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    if len(sys.argv) > 2 and sys.argv[1] == "--links":
        root = os.path.abspath(sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.path.dirname(__file__), "..", ".."))
        problems = check_links(root, sys.argv[2])
        for p in problems:
            print(p)
        print(f"check_layers --links: {len(problems)} problem(s)" if problems
              else "check_layers --links: every target links only the layers its layer may use")
        return 1 if problems else 0
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    problems = check(root)
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} problem(s)" if problems else "check_layers: every include within the layer table")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
