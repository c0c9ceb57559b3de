"""A send to a peer that has exited, over the Gloo path (CPU tensors under torchrun): the error must say the
connection to that rank is gone, soon, not a timeout (issue 17, defect 6).

Two ranks. After a good allreduce and a good send/recv pair, rank 1 leaves with ``os._exit(0)`` (no
destroy, no goodbye: a crashed worker). Rank 0 waits until the exit has closed the connection, then sends
to rank 1. The group's timeout is 20 s; the send must fail well before it, naming rank 1 and the closed
connection, and ``destroy_process_group`` must return.
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

NPROC = 2
TIMEOUT_S = 20


def worker():
    rank = int(os.environ["RANK"])
    rep = harness._Reporter(rank)
    dist.init_process_group("ringguard", timeout=timedelta(seconds=TIMEOUT_S))
    t = torch.full((1 << 12,), float(rank + 1))
    dist.all_reduce(t)
    if rank == 0:
        dist.send(t, 1)
    else:
        dist.recv(t, 0)
    rep.write("warm-up", "ok")
    if rank == 1:
        rep.write(harness.DONE, "ok")
        os._exit(0)
    time.sleep(2.0)  # rank 1 is gone and its sockets closed
    t0 = time.monotonic()
    try:
        dist.send(t, 1)
        rep.write("sender", "fail", error="send to an exited rank returned", seconds=time.monotonic() - t0)
    except Exception as err:  # noqa: BLE001 - the error is the result
        rep.write("sender", "ok", result={"error": f"{type(err).__name__}: {err}"}, seconds=time.monotonic() - t0)
    t0 = time.monotonic()
    dist.destroy_process_group()
    rep.write(harness.TEARDOWN, "ok", seconds=time.monotonic() - t0)
    rep.write(harness.DONE, "ok")


def test_send_to_an_exited_rank_names_the_closed_connection():
    run = harness.launch(__file__, NPROC, timeout=120)
    assert not run.timed_out, f"{run.describe()}\n--- log tail ---\n{run.tail()}"
    assert sorted(run.records.get("warm-up", {})) == [0, 1], run.tail()
    rec = run.records.get("sender", {}).get(0)
    assert rec is not None, f"{run.describe()}\n{run.tail()}"
    assert rec["status"] == "ok", rec["error"]
    err = rec["result"]["error"]
    assert rec["seconds"] < 5, f"took {rec['seconds']:.1f} s: {err}"
    assert "rank 1" in err, f"does not name rank 1: {err}"
    assert "connection to rank 1 closed" in err, f"does not say the connection closed: {err}"
    assert "Timeout" not in err and "timed out" not in err, f"a timeout, not the cause: {err}"
    assert sorted(run.records.get(harness.TEARDOWN, {})) == [0], f"destroy did not return\n{run.tail()}"


if __name__ == "__main__":
    worker()
