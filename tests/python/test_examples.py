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


def test_examples_stop_when_the_loss_diverges_and_refuse_bad_arguments():
    """A learning rate that makes the loss non-finite stops every rank at the next log point with a message
    and exit 1 (the examples used to print a NaN loss to the end and exit 0); bad arguments are argparse
    errors naming the flag."""
    for name in ("torch_ddp_train.py", "torch_fsdp_train.py"):
        script = os.path.join(EXAMPLES, name)
        cmd = harness.torchrun_cmd(script, 2, ["--steps", "30", "--lr", "1e30", "--log-every", "5"])
        rc, timed_out, seconds, log = harness.run_command(cmd)
        assert not timed_out, f"{name}: timed out after {seconds:.0f} s\n{log[-4000:]}"
        assert re.search(r"step (\d+): the loss is not finite on some rank \(here (nan|inf)\): training "
                         r"diverged \(try a smaller --lr\)", log), f"{name}: no divergence message\n{log[-4000:]}"
        m = FINAL.search(log)
        assert m and int(m.group(2)) < 30, f"{name}: did not stop early\n{log[-4000:]}"
        assert rc != 0, f"{name}: exit 0 after diverging"
        for args, message in ((["--lr", "nan"], "argument --lr: must be a finite positive number, got nan"),
                              (["--fault-prob", "2"], "argument --fault-prob: must be in [0, 1], got 2"),
                              (["--steps", "0"], "argument --steps: must be a positive integer, got 0")):
            rc, _, _, log = harness.run_command(harness.torchrun_cmd(script, 1, args))
            assert rc != 0 and message in log, f"{name} {args}: rc={rc}\n{log[-2000:]}"
