"""Issue lanes: name the thread that issues collectives, so that a different order across ranks is caught.

Collectives are matched across ranks by the order in which each rank issued them, not by the thread that
issued them: two threads that issue same-shape collectives in a different order on different ranks get
each other's results, and every check passes (as with NCCL and gloo; docs/TORCH.md, "Errors"). Inside
``with ringguard.issue_lane("prefetch"):`` every collective (and send/recv) this thread issues on a
ringguard process group carries the lane and the lane's own number in its fingerprint, so that order
difference fails on every rank with an error naming both lanes instead::

    def prefetch():
        with ringguard.issue_lane("prefetch"):
            dist.all_gather_into_tensor(out, shard, async_op=True).wait()

A lane is paired across ranks by its name, and it is the calling OS thread's: collectives issued by
other threads (autograd hooks, DDP's reducer) carry theirs. Lanes nest; leaving one restores the
enclosing lane. Outside every lane collectives match by issue order alone, as before.
"""

from __future__ import annotations

from . import _ext


def issue_lane(name: str):
    """A context manager that puts the calling thread in issue lane `name` for the ``with`` block.

    Raises ``ValueError`` for a name that cannot name a lane (empty, or one whose id, the CRC-32 of the
    name, is 0 or another name's already used in this process)."""
    return _ext.load().IssueLane(name)


def current_issue_lane() -> int:
    """The id of the calling thread's issue lane (0: none)."""
    return int(_ext.load().current_issue_lane())
