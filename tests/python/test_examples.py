"""The torchrun examples end with their `final:` line and exit 0 (identical parameters, every injected
corruption detected, none escaped), under the harness's wall-clock limit."""

import os
import re

import harness

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
FINAL = re.compile(r"final: ranks=(\d+) steps=(\d+) loss=(\S+) params_identical=(\S+) detected=(\d+) "
                   r"retransmitted=(\d+) injected=(\d+) escaped=(\d+)")


def test_fsdp_example_with_faults():
    script = os.path.join(EXAMPLES, "torch_fsdp_train.py")
    cmd = harness.torchrun_cmd(script, 2, ["--steps", "40", "--fault-prob", "0.02", "--log-every", "20"])
    rc, timed_out, seconds, log = harness.run_command(cmd)
    assert not timed_out, f"timed out after {seconds:.0f} s\n{log[-4000:]}"
    m = FINAL.search(log)
    assert m, f"no final line (rc={rc})\n{log[-4000:]}"
    ranks, steps, loss, identical, detected, _, injected, escaped = m.groups()
    assert (ranks, steps, identical) == ("2", "40", "yes"), m.group(0)
    assert int(injected) > 0 and detected == injected and escaped == "0", m.group(0)
    assert float(loss) < 2.5, f"did not learn: {m.group(0)}"  # ln(61) = 4.11 at the start
    assert rc == 0, f"rc={rc}\n{log[-4000:]}"
