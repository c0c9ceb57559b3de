#!/usr/bin/env python3
"""Times torch.isfinite(x).all() on a 1 GiB fp32 CUDA tensor (the baseline of the NaN scan).

    python3 bench/gpu/isfinite_torch.py [--bytes 1073741824] [--iters 20] [--warmup 5]

CUDA events around each call, median of --iters after --warmup. Prints the median in ms and the read
bandwidth, and as its last line `torch_isfinite_ms=<ms>`, which scripts/gpu_check.sh passes to
bench_kernels --torch-isfinite-ms for the same-run speedup.
"""
import argparse
import statistics
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=int, default=1 << 30)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch sees no CUDA device", file=sys.stderr)
        return 2

    n = args.bytes // 4
    x = torch.randn(n, dtype=torch.float32, device="cuda")
    ok = None
    for _ in range(args.warmup):
        ok = torch.isfinite(x).all()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        ok = torch.isfinite(x).all()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = statistics.median(times)
    print("device: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__))
    print("torch.isfinite(x).all() on %d fp32 (%.3f GiB): median %.4f ms, %.3f TB/s read, result %s"
          % (n, n * 4 / 2**30, ms, n * 4 / (ms * 1e-3) / 1e12, bool(ok)))
    print("torch_isfinite_ms=%.4f" % ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
