#!/usr/bin/env python3
"""Host CRC-32 rate of the two backends ringguard's host path can use, on this machine, for docs/SCALE.md:
ISA-L's ``crc32_gzip_refl`` (the default when libisal is installed; src/core/crc32.cc) called through ctypes,
and zlib's ``crc32`` (the fallback) through Python's zlib module. One thread, buffers already in memory;
prints the median and best of ``--reps`` calls per size, in GB/s.

    python3 bench/crc_rate.py [--reps 50] > bench/results/scale/crc_rate_host.log

This is the checksum alone: a verified slice also pays the reduction or copy and the transfer
(bench_collectives' ``apply`` column is verify + reduce/copy).
"""

import argparse
import ctypes
import ctypes.util
import datetime
import os
import platform
import statistics
import time
import zlib


def rates(fn, buf, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(buf)
        times.append(time.perf_counter() - t0)
    return len(buf) / statistics.median(times) / 1e9, len(buf) / min(times) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    load = open("/proc/loadavg").read().split()[:3]
    print("# command: python3 bench/crc_rate.py --reps", args.reps)
    print(f"# machine: {platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    print(f"# date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; "
          f"load average before: {' '.join(load)} (the cores are shared with other jobs)")
    backends = []
    path = ctypes.util.find_library("isal")
    if path:
        isal = ctypes.CDLL(path)
        isal.crc32_gzip_refl.restype = ctypes.c_uint32
        isal.crc32_gzip_refl.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint64]
        backends.append(("isa-l crc32_gzip_refl", lambda b: isal.crc32_gzip_refl(0, b, len(b))))
        sample = os.urandom(4096)
        assert isal.crc32_gzip_refl(0, sample, len(sample)) == zlib.crc32(sample), "ISA-L and zlib disagree"
    else:
        print("# libisal not found: ISA-L not measured")
    backends.append(("zlib crc32", zlib.crc32))
    print(f"{'backend':24} {'bytes':>10} {'median GB/s':>12} {'best GB/s':>10}")
    for size in (4096, 16384, 1 << 20, 64 << 20):
        buf = os.urandom(size)
        for name, fn in backends:
            med, best = rates(fn, buf, args.reps if size < (64 << 20) else max(5, args.reps // 5))
            print(f"{name:24} {size:10d} {med:12.2f} {best:10.2f}")
    print(f"# load average after: {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    main()
