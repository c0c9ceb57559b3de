"""A rank that dies in the middle of training: the others get an error, not a hang, well within the timeout.

Three ranks under torchrun. After one good allreduce the last rank leaves with ``os._exit(0)`` (exit code
0, so torchrun lets the others finish instead of tearing them down), the way a crashed or preempted worker
disappears. The survivors' next allreduce must raise, well before the group's timeout, and
``destroy_process_group`` must return. The launch's wall-clock limit is what proves "no hang".
On CPU tensors the ranks talk through ringguard's Gloo-backed transport; with a GPU the same run goes over
CUDA tensors (by default the one-sided path of the ranks of one host, whose error comes at the call after the
failed one; RINGGUARD_DEVICE_TRANSPORT=nccl or staged the host-driven pipeline).
"""

import os
import sys
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

NPROC = 3
TIMEOUT_S = 30  # the group's timeout; the survivors must fail long before it
VICTIM = NPROC - 1


def worker():
    rank = int(os.environ["RANK"])
    rep = harness._Reporter(rank)
    device = os.environ.get("RINGGUARD_TEST_DEVICE", "cpu")
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("ringguard", timeout=timedelta(seconds=TIMEOUT_S))
    t = torch.full((1 << 16,), float(rank + 1), device=device)
    dist.all_reduce(t)
    assert t[0].item() == NPROC * (NPROC + 1) / 2, t[0].item()
    rep.write("warm-up", "ok")
    if rank == VICTIM:
        rep.write(harness.DONE, "ok")
        os._exit(0)  # no destroy, no goodbye: as a crashed worker leaves
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
        if device == "cuda":
            torch.cuda.synchronize()
            if harness.device_transport(NPROC) == "peer":
                # The one-sided path's kernel is one launch with no host round trip: its error (the watchdog
                # saw the victim's process exit, and the kernel stopped waiting for it) reaches the host
                # asynchronously, as NCCL's does, and the next call raises it.
                dist.all_reduce(t)
                torch.cuda.synchronize()
        rep.write("survivor", "fail", error="allreduce with a dead rank returned", seconds=time.monotonic() - t0)
    except Exception as err:  # noqa: BLE001 - the error is the result
        rep.write("survivor", "ok", result={"error": f"{type(err).__name__}: {err}"},
                  seconds=time.monotonic() - t0)
    t0 = time.monotonic()
    dist.destroy_process_group()
    rep.write(harness.TEARDOWN, "ok", seconds=time.monotonic() - t0)
    rep.write(harness.DONE, "ok")


def _launch(device: str) -> harness.Launch:
    return harness.launch(__file__, NPROC, env={"RINGGUARD_TEST_DEVICE": device}, timeout=120)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_survivors_fail_fast_and_tear_down(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    run = _launch(device)
    assert not run.timed_out, f"{run.describe()}\n--- log tail ---\n{run.tail()}"
    assert sorted(run.records.get("warm-up", {})) == list(range(NPROC)), run.tail()
    survivors = run.records.get("survivor", {})
    assert sorted(survivors) == list(range(NPROC - 1)), f"{run.describe()}\n{run.tail()}"
    for r, rec in sorted(survivors.items()):
        assert rec["status"] == "ok", f"rank {r}: {rec['error']}"
        # Well within the group's timeout: the dead peer's closed connection is noticed, not waited out.
        assert rec["seconds"] < TIMEOUT_S / 2, f"rank {r} took {rec['seconds']} s: {rec['result']}"
        assert f"rank {VICTIM}" in rec["result"]["error"], f"rank {r}: the error does not name the dead rank: " \
            f"{rec['result']['error']}"
    teardown = run.records.get(harness.TEARDOWN, {})
    assert sorted(teardown) == list(range(NPROC - 1)), f"destroy did not return on every survivor\n{run.tail()}"
    assert sorted(run.records.get(harness.DONE, {})) == list(range(NPROC)), run.tail()


if __name__ == "__main__":
    worker()
