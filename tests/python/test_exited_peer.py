"""A peer that is gone, over the Gloo path (CPU tensors under torchrun): the error must say so, soon, not a
timeout.

Exited (issue 17, defect 6): two ranks; after a good allreduce and a good send/recv pair, rank 1 leaves
with ``os._exit(0)`` (no destroy, no goodbye: a crashed worker). Rank 0 waits until the exit has closed the
connection, then sends to rank 1. The group's timeout is 20 s; the send must fail well before it, naming
rank 1 and the closed connection, and ``destroy_process_group`` must return.

Destroyed (RG_PEER=destroyed): rank 1 skips a collective and destroys its process group while rank 0 waits
in it, then stays alive (gloo fails rank 0 at once: "Connection closed by peer"; ringguard used to leave it
to its timeout, blaming rank 1's progress). Rank 0's all_reduce and a later recv from rank 1 must fail at
once saying rank 1 has left, and rank 1's destroy must not wait out its goodbye wait (10 s).

Stalled (RG_PEER=stalled): rank 1 is alive but never joins an all_reduce (a hung worker). Rank 0 times out
naming it, then destroys its group while rank 1 still sleeps: the destroy must return at once. A clean end
waits up to 10 s per transport for each peer's goodbye, which a stalled peer never sends, so the group ends
like abort() after a failure (it waited 10 s for the point-to-point lanes' transport).
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
STALL_TIMEOUT_S = 3


def _start(timeout_s):
    """The group and one good all_reduce: (rank, reporter, tensor)."""
    rank = int(os.environ["RANK"])
    rep = harness._Reporter(rank)
    dist.init_process_group("ringguard", timeout=timedelta(seconds=timeout_s))
    t = torch.full((1 << 12,), float(rank + 1))
    dist.all_reduce(t)
    return rank, rep, t


def _expect_failure(rep, case, call):
    """Records `case` as ok with the error `call` raised, or as failed if it returned."""
    t0 = time.monotonic()
    try:
        call()
        rep.write(case, "fail", error="returned", seconds=time.monotonic() - t0)
    except Exception as err:  # noqa: BLE001 - the error is the result
        rep.write(case, "ok", result={"error": f"{type(err).__name__}: {err}"}, seconds=time.monotonic() - t0)


def _destroy(rep):
    t0 = time.monotonic()
    dist.destroy_process_group()
    rep.write(harness.TEARDOWN, "ok", seconds=time.monotonic() - t0)


def destroyed_worker():
    rank, rep, t = _start(TIMEOUT_S)
    rep.write("warm-up", "ok")
    if rank == 1:
        _destroy(rep)
        time.sleep(8.0)  # alive, its group gone: no closed socket tells rank 0
        rep.write(harness.DONE, "ok")
        return
    _expect_failure(rep, "all_reduce", lambda: dist.all_reduce(t))
    _expect_failure(rep, "recv", lambda: dist.recv(t, 1))
    _destroy(rep)
    rep.write(harness.DONE, "ok")


def stalled_worker():
    rank, rep, t = _start(STALL_TIMEOUT_S)
    rep.write("warm-up", "ok")
    if rank == 1:
        time.sleep(STALL_TIMEOUT_S + 12.0)  # past rank 0's timeout and its destroy's goodbye wait
    else:
        _expect_failure(rep, "all_reduce", lambda: dist.all_reduce(t))
    _destroy(rep)
    rep.write(harness.DONE, "ok")


def worker():
    if os.environ.get("RG_PEER") == "destroyed":
        destroyed_worker()
        return
    if os.environ.get("RG_PEER") == "stalled":
        stalled_worker()
        return
    rank, rep, t = _start(TIMEOUT_S)
    if rank == 0:
        dist.send(t, 1)
    else:
        dist.recv(t, 0)
    rep.write("warm-up", "ok")
    if rank == 1:
        rep.write(harness.DONE, "ok")
        os._exit(0)
    time.sleep(2.0)  # rank 1 is gone and its sockets closed
    _expect_failure(rep, "sender", lambda: dist.send(t, 1))
    _destroy(rep)
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



def test_a_peer_that_destroyed_its_group_has_left_at_once():
    run = harness.launch(__file__, NPROC, env={"RG_PEER": "destroyed"}, timeout=120)
    assert not run.timed_out, f"{run.describe()}\n--- log tail ---\n{run.tail()}"
    assert sorted(run.records.get("warm-up", {})) == [0, 1], run.tail()
    for case in ("all_reduce", "recv"):
        rec = run.records.get(case, {}).get(0)
        assert rec is not None, f"{case}: no record\n{run.describe()}\n{run.tail()}"
        assert rec["status"] == "ok", f"{case}: {rec['error']}"
        err = rec["result"]["error"]
        assert rec["seconds"] < 5, f"{case} took {rec['seconds']:.1f} s: {err}"
        assert "rank 1 has left: its communicator over this group ended" in err, f"{case}: {err}"
        assert "Timeout" not in err and "timed out" not in err, f"{case}: a timeout, not the cause: {err}"
    teardown = run.records.get(harness.TEARDOWN, {})
    assert sorted(teardown) == [0, 1], f"destroy did not return\n{run.tail()}"
    assert teardown[1]["seconds"] < 5, f"rank 1's destroy took {teardown[1]['seconds']:.1f} s"


def test_destroy_after_a_timeout_on_a_stalled_peer_returns_at_once():
    run = harness.launch(__file__, NPROC, env={"RG_PEER": "stalled"}, timeout=120)
    assert not run.timed_out, f"{run.describe()}\n--- log tail ---\n{run.tail()}"
    assert sorted(run.records.get("warm-up", {})) == [0, 1], run.tail()
    rec = run.records.get("all_reduce", {}).get(0)
    assert rec is not None, f"no record\n{run.describe()}\n{run.tail()}"
    assert rec["status"] == "ok", rec["error"]
    err = rec["result"]["error"]
    assert "Timeout" in err and "rank 1" in err, f"not a timeout naming rank 1: {err}"
    teardown = run.records.get(harness.TEARDOWN, {})
    assert sorted(teardown) == [0, 1], f"destroy did not return\n{run.tail()}"
    assert teardown[0]["seconds"] < 5, f"rank 0's destroy took {teardown[0]['seconds']:.1f} s"
    assert teardown[1]["seconds"] < 5, f"rank 1's destroy took {teardown[1]['seconds']:.1f} s"


if __name__ == "__main__":
    worker()
