#!/usr/bin/env python3
"""Register / spill check of the CUDA kernels (the `regcheck` build target).

Reads the ptxas resource reports (-Xptxas -v) that cmake/nvcc_capture.sh saved next to each object of the
normal build (<object>.ptxas.log), so nothing is compiled twice, and the __launch_bounds__ of every kernel
from the .cu sources. Prints one row per (kernel, arch) and fails when

  * any function spills (spill stores or loads > 0),
  * a kernel uses more registers than its bounds allow: 65536 / (maxThreads * minBlocks), rounded down to
    the allocation granularity of 8, at most 255,
  * a kernel has no __launch_bounds__ the script can read (literal integers, or names defined in the same
    file as `constexpr <integer type> kName = <literal>;`),
  * an expected architecture has no report (e.g. the launcher was not in effect).

usage: regcheck.py --sources a.cu b.cu --logs o1.ptxas.log o2.ptxas.log [--archs 80,90]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

REGISTER_FILE = 65536
GRANULARITY = 8
MAX_REGISTERS = 255


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse_int(token, constants):
    token = token.strip()
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*", token)
    if m:
        return int(m.group(1), 0)
    if re.fullmatch(r"[A-Za-z_]\w*", token) and token in constants:
        return constants[token]
    return None


def parse_bounds(path):
    """{kernel name: (maxThreads, minBlocks) or error string} for the kernels of one .cu file."""
    text = strip_comments(open(path, encoding="utf-8").read())
    constants = {}
    for m in re.finditer(
            r"constexpr\s+(?:static\s+)?(?:unsigned\s+|signed\s+)?(?:int|long|size_t|uint32_t|int32_t|uint64_t|int64_t|unsigned)?"
            r"\s*([A-Za-z_]\w*)\s*=\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*;", text):
        constants[m.group(1)] = int(m.group(2), 0)
    kernels = {}
    pattern = re.compile(r"__launch_bounds__\s*\(([^()]*)\)\s*(?:void\s+)?([A-Za-z_]\w*)\s*\(")
    for m in pattern.finditer(text):
        args = [a for a in m.group(1).split(",")]
        name = m.group(2)
        threads = parse_int(args[0], constants)
        blocks = parse_int(args[1], constants) if len(args) > 1 else 1
        if threads is None or blocks is None:
            kernels[name] = "unreadable __launch_bounds__(%s)" % m.group(1).strip()
        else:
            kernels[name] = (threads, max(blocks, 1))
    return kernels


def parse_log(path):
    """[(mangled name, arch, is_entry, info dict)] from one ptxas report."""
    functions = {}
    order = []
    arch = "?"
    current = None
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\w+)'", line)
        if m:
            arch = m.group(2)
            key = (m.group(1), arch)
            if key not in functions:
                functions[key] = {"entry": True}
                order.append(key)
            current = key
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            key = (m.group(1), arch)
            if key not in functions:
                functions[key] = {"entry": False}
                order.append(key)
            current = key
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current is not None:
            info = functions[current]
            info["stack"], info["spill_st"], info["spill_ld"] = (int(g) for g in m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and current is not None:
            info = functions[current]
            info["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            info["smem"] = int(s.group(1)) if s else 0
    return [(name, a, functions[(name, a)]["entry"], functions[(name, a)]) for name, a in order]


def demangle_all(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    if len(out) != len(names):
        return {n: n for n in names}
    pretty = {}
    for n, d in zip(names, out):
        d = re.sub(r"\(anonymous namespace\)::", "", d)
        d = re.sub(r"_GLOBAL__N__\w+::", "", d)
        pretty[n] = d
    return pretty


def find_bounds(mangled, bounds):
    # Itanium mangling spells an identifier as <length><name>, so "19crc32SegmentsKernel" only occurs for
    # that exact identifier (the digit before it may belong to an anonymous-namespace hash). extern "C"
    # kernels are not mangled at all.
    best = (None, None)
    for name, value in bounds.items():
        if mangled == name or ("%d%s" % (len(name), name)) in mangled:
            if best[0] is None or len(name) > len(best[0]):
                best = (name, value)
    return best


def budget(threads, blocks):
    return min(MAX_REGISTERS, (REGISTER_FILE // (threads * blocks)) // GRANULARITY * GRANULARITY)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", nargs="+", required=True, help=".cu files declaring the kernels")
    parser.add_argument("--logs", nargs="+", required=True,
                        help="<object>.ptxas.log files (or the objects themselves: .ptxas.log is appended)")
    parser.add_argument("--archs", default="", help="comma/semicolon separated architectures that must appear")
    args = parser.parse_args()

    bounds_by_file = {}
    all_bounds = {}
    for src in args.sources:
        b = parse_bounds(src)
        bounds_by_file[os.path.basename(src)] = b
        all_bounds.update(b)

    failures = []
    rows = []
    archs_seen = set()
    logs = [piece for log in args.logs for piece in log.split(";") if piece]
    for log in logs:
        if not log.endswith(".ptxas.log"):
            if not re.search(r"\.cu\.(o|obj)$", log):
                continue  # objects of host-only sources have no ptxas report
            log += ".ptxas.log"
        if not os.path.exists(log):
            failures.append("missing ptxas report %s (was the object built through cmake/nvcc_capture.sh?)" % log)
            continue
        # crc32.cu.o.ptxas.log -> crc32.cu
        source = os.path.basename(log)[: -len(".ptxas.log")]
        source = re.sub(r"\.(o|obj)$", "", source)
        file_bounds = bounds_by_file.get(source, all_bounds)
        for mangled, arch, entry, info in parse_log(log):
            archs_seen.add(arch)
            rows.append((mangled, arch, entry, info, file_bounds, source))

    names = sorted({r[0] for r in rows})
    pretty = demangle_all(names)
    table = []
    for mangled, arch, entry, info, file_bounds, source in rows:
        regs = info.get("regs")
        st, ld, stack, smem = info.get("spill_st", 0), info.get("spill_ld", 0), info.get("stack", 0), info.get("smem", 0)
        status = []
        limit = ""
        if st or ld:
            status.append("SPILL")
        if entry:
            _, b = find_bounds(mangled, file_bounds)
            if b is None:
                status.append("NO __launch_bounds__")
            elif isinstance(b, str):
                status.append(b)
            else:
                limit = budget(*b)
                if regs is not None and regs > limit:
                    status.append("REGS > %d" % limit)
        elif not (st or ld):
            continue  # non-kernel functions are listed only when they spill
        label = pretty.get(mangled, mangled)
        table.append((label if entry else "(device fn) " + label, arch, "" if regs is None else str(regs),
                      str(limit), str(st), str(ld), str(smem), str(stack), ", ".join(status) or "ok"))
        if status:
            failures.append("%s [%s] in %s: %s" % (label, arch, source, ", ".join(status)))

    expected = [a.strip() for a in re.split(r"[,;\s]+", args.archs) if a.strip()]
    for a in expected:
        a = re.sub(r"-(real|virtual)$", "", a)
        if not re.fullmatch(r"\d+[af]?", a):
            continue  # native / all / all-major: nothing to insist on
        if "sm_" + a not in archs_seen:
            failures.append("no ptxas report for sm_%s" % a)

    header = ("kernel", "arch", "regs", "budget", "spill st", "spill ld", "smem", "stack", "status")
    widths = [max(len(str(r[i])) for r in table + [header]) for i in range(len(header))]
    widths[0] = min(widths[0], 100)
    def fmt(r):
        first = r[0] if len(r[0]) <= widths[0] else r[0][: widths[0] - 3] + "..."
        return "  ".join([first.ljust(widths[0])] + [str(c).rjust(w) for c, w in zip(r[1:-1], widths[1:-1])] + [r[-1]])
    print(fmt(header))
    print("  ".join("-" * w for w in widths))
    for r in sorted(table, key=lambda r: (r[0], r[1])):
        print(fmt(r))
    if not table and not failures:
        failures.append("no kernels found in %d ptxas reports" % len(args.logs))
    if failures:
        print("\nregcheck: FAILED")
        for f in failures:
            print("  " + f)
        return 1
    print("\nregcheck: %d kernel/arch pairs, no spills, all within their __launch_bounds__ budgets" % len(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
