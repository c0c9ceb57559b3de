"""bench/torch/bench_fsdp.py still runs: a tiny FSDP2 model, 2 ranks, one round of 2 steps per backend, under a
wall-clock limit; it must exit 0 with its result lines, the parameters bit-identical to FSDP2 over gloo
(2 ranks: two addends per element, exact halving) and the ranks agreeing."""

import os
import re

import harness

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "torch", "bench_fsdp.py")
TINY = ["--layers", "1", "--dim", "16", "--heads", "2", "--seq", "4", "--vocab", "37", "--batch", "2",
        "--warmup", "1", "--steps", "2", "--rounds", "1"]
CHECK = re.compile(r"params_bit_identical=(\S+) max_abs_diff=(\S+).* ranks_agree=(\S+)")
RATIO = re.compile(r"ringguard_vs_gloo=(\S+) ringguard_over_gloo=(\S+) ringguard_ms=(\S+) gloo_ms=(\S+)")
COUNTS = re.compile(r"ringguard counters, timed steps: collectives=(\d+) .* injected=(\d+) detected=(\d+) "
                    r"retransmitted=(\d+) escaped=(\d+)")


def test_bench_fsdp_tiny_np2():
    cmd = harness.torchrun_cmd(BENCH, 2, TINY)
    rc, timed_out, seconds, log = harness.run_command(cmd, timeout=90)
    assert not timed_out, f"timed out after {seconds:.0f} s\n{log[-4000:]}"
    m = CHECK.search(log)
    assert m, f"no check line (rc={rc})\n{log[-4000:]}"
    assert m.group(1) == "yes" and float(m.group(2)) == 0.0 and m.group(3) == "yes", m.group(0)
    r = RATIO.search(log)
    assert r and float(r.group(3)) > 0 and float(r.group(4)) > 0, log[-4000:]
    c = COUNTS.search(log)
    assert c, log[-4000:]
    # 2 timed steps of a root + 1 block: all-gathers in forward and backward, reduce-scatters in backward.
    assert int(c.group(1)) >= 2 * 3 and c.groups()[1:] == ("0", "0", "0", "0"), c.group(0)
    assert rc == 0, f"rc={rc}\n{log[-4000:]}"
