"""The timeline and the run summary under torchrun (issue 18): a faulty run with RINGGUARD_TIMELINE and
RINGGUARD_SUMMARY set leaves, per rank, a Chrome trace in the format Perfetto's JSON importer reads and a
summary whose counters are the backend's. Checked here: the trace's format, a complete span for every
collective, the same collective numbers on every rank, a repair for every detection (a retransmission,
then the slice received again), and the summary against ``ringguard.counters()``.
"""

import json
import os
import tempfile
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import harness

CASES = harness.Cases()
NPROC = 2
KINDS = ["allreduce"] * 4 + ["broadcast", "allgather", "reduce_scatter"]


@CASES.case("faulty-run")
def _(ctx):
    import ringguard

    # Every received slice is hit with probability 0.25 (its retransmission is clean): detections on
    # both ranks, each repaired, results exact.
    ringguard.set_fault(prob=0.25, seed=11 + ctx.rank, mode="bitflip")
    n = 300000  # 1.2 MB: with the 64 KiB slices set below, ~9 slices per block
    base = (torch.arange(n, dtype=torch.float32) % 97)
    for _ in range(4):
        t = base + ctx.rank
        dist.all_reduce(t)
        assert torch.equal(t, 2 * base + 1)
    b = base + ctx.rank
    dist.broadcast(b, src=1)
    assert torch.equal(b, base + 1)
    out = torch.empty(n * ctx.size)
    dist.all_gather_into_tensor(out, base + ctx.rank)
    assert torch.equal(out, torch.cat([base + r for r in range(ctx.size)]))
    rs = torch.empty(n // 2)
    dist.reduce_scatter_tensor(rs, torch.cat([base[: n // 2] + ctx.rank] * ctx.size))
    assert torch.equal(rs, 2 * base[: n // 2] + 1)
    ringguard.set_fault(prob=0)
    return {"counters": ringguard.counters(), "summary": ringguard.summary(), "rank": ctx.rank}


def _init():
    dist.init_process_group("ringguard", timeout=timedelta(seconds=60))


# --- pytest side ------------------------------------------------------------------------------------

_DIR = tempfile.mkdtemp(prefix="ringguard-obs-")
_ENV = {"RINGGUARD_TIMELINE": os.path.join(_DIR, "timeline"),
        "RINGGUARD_SUMMARY": os.path.join(_DIR, "summary"),
        "RINGGUARD_SLICE_BYTES": "65536"}


@pytest.fixture(scope="module")
def run():
    return harness.launch(__file__, NPROC, env=_ENV)


def _load(kind, rank):
    path = os.path.join(_DIR, f"{kind}.{rank}.json")
    assert os.path.exists(path), f"{path} was not written; files: {os.listdir(_DIR)}"
    with open(path) as f:
        return json.load(f)


def _check_format(trace):
    # What Perfetto's (and chrome://tracing's) JSON importer needs: a traceEvents list whose events name
    # their phase, process, thread and time; complete events their duration; metadata names the tracks.
    assert isinstance(trace.get("traceEvents"), list) and trace["traceEvents"]
    for e in trace["traceEvents"]:
        assert e["ph"] in ("X", "i", "C", "M"), e
        assert isinstance(e["name"], str) and isinstance(e["pid"], int), e
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)), e
        if e["ph"] in ("X", "i"):
            assert isinstance(e["tid"], int), e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
    assert trace["otherData"]["dropped"] == 0


def _comm_events(trace, cat):
    tracks = {e["tid"] for e in trace["traceEvents"]
              if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"].startswith("comm")}
    return [e for e in trace["traceEvents"] if e.get("cat") == cat and e.get("tid") in tracks]


def test_faulty_run_leaves_matching_timelines_and_summaries(run):
    res = harness.results(run, "faulty-run")
    traces = [_load("timeline", r) for r in range(NPROC)]
    summaries = [_load("summary", r) for r in range(NPROC)]
    seqs = []
    for r, trace in enumerate(traces):
        _check_format(trace)
        colls = _comm_events(trace, "collective")
        # Every collective is a complete span; the faulty case's are the last len(KINDS) ones (init_process_group
        # and the barriers before it may add their own).
        assert [c["name"] for c in colls[-len(KINDS):]] == KINDS, [c["name"] for c in colls]
        seqs.append([c["args"]["seq"] for c in colls])
        detects = _comm_events(trace, "detect")
        assert len(detects) == res[r]["counters"]["detected"] > 0, (len(detects), res[r]["counters"])
        assert len(_comm_events(trace, "slice")) >= res[r]["counters"]["slices_verified"]
    # The ranks agree on the collectives' numbers.
    assert seqs[0] == seqs[1]
    # Every detection is repaired: some rank resends the slice from its retained bytes (at the detected step,
    # or earlier when the repair replays the column from there), and the detecting rank receives it again,
    # verified, in a later attempt.
    retransmits = [x["args"] for t in traces for x in _comm_events(t, "retransmit")]
    for r, trace in enumerate(traces):
        slices = _comm_events(trace, "slice")
        for d in _comm_events(trace, "detect"):
            a = d["args"]
            assert any(x["seq"] == a["seq"] and x["slice"] == a["slice"] and x["step"] <= a["step"]
                       for x in retransmits), d
            assert any(s["args"]["seq"] == a["seq"] and s["args"]["step"] == a["step"]
                       and s["args"]["slice"] == a["slice"] and s["args"]["from"] == a["sender"]
                       and s["args"]["attempt"] > 0 and s["ts"] > d["ts"] for s in slices), d
    for r in range(NPROC):
        counters = res[r]["counters"]
        # ringguard.summary() in the run: its communicators' counters add up to the backend's.
        live = res[r]["summary"]["communicators"]
        for key, value in counters.items():
            assert sum(c["counters"][key] for c in live) == value, key
        # The file, written when the group was destroyed: the same communicators, now not live, with at
        # least as much traffic and the same detections (no fault after the case).
        done = summaries[r]["communicators"]
        assert [c["track"] for c in done] == [c["track"] for c in live]
        assert all(not c["live"] for c in done)
        for key in ("detected", "retransmitted", "injected"):
            assert sum(c["counters"][key] for c in done) == counters[key], key
        assert sum(c["collectives"]["allreduce"]["calls"] for c in done if "allreduce" in c["collectives"]) >= 4
        assert summaries[r]["rank"] == r


def test_launch(run):
    harness.check_launch(run)


if __name__ == "__main__":
    harness.run_worker(CASES, _init)


def test_unwritable_prefix_is_reported_at_import_not_at_exit(tmp_path):
    """A RINGGUARD_TIMELINE / RINGGUARD_SUMMARY prefix whose folder does not exist is reported when the
    process starts (import), naming the variable and the folder; the exit then writes nothing and says
    nothing more about it."""
    import subprocess
    import sys

    missing = tmp_path / "no" / "such" / "folder"
    env = dict(os.environ, RINGGUARD_TIMELINE=str(missing / "tl"), RINGGUARD_SUMMARY=str(missing / "sum"))
    code = "import ringguard, sys; sys.stderr.write('IMPORTED\\n')"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    before, _, after = r.stderr.partition("IMPORTED")
    for name, leaf in (("RINGGUARD_TIMELINE", "tl"), ("RINGGUARD_SUMMARY", "sum")):
        assert f"{name}='{missing / leaf}': cannot write into '{missing}'" in before, r.stderr
    assert "No such file or directory" in before, r.stderr
    assert "cannot write" not in after, r.stderr  # nothing more at exit
    assert not missing.exists()


@pytest.mark.parametrize("case", ["folder-is-a-file", "file-is-a-folder"])
def test_a_prefix_that_cannot_take_its_file_is_reported_at_import(tmp_path, case):
    """The early check covers more than a missing folder: a prefix under a regular file, and a prefix whose
    ``<prefix>.<rank>.json`` is a folder, are reported at import (and the exit stays quiet and normal)."""
    import subprocess
    import sys

    if case == "folder-is-a-file":
        (tmp_path / "afile").write_text("x")
        prefix, why = tmp_path / "afile" / "sum", f"'{tmp_path / 'afile'}' is not a folder"
    else:
        (tmp_path / "sum.0.json").mkdir()
        prefix, why = tmp_path / "sum", f"'{tmp_path / 'sum.0.json'}' is a folder"
    env = dict(os.environ, RINGGUARD_SUMMARY=str(prefix), RANK="0")
    code = "import ringguard, sys; sys.stderr.write('IMPORTED\\n')"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    before, _, after = r.stderr.partition("IMPORTED")
    assert f"RINGGUARD_SUMMARY='{prefix}': {why}: no file is written" in before, r.stderr
    assert after.strip() == "", r.stderr


def test_a_write_that_fails_at_exit_is_reported_and_the_process_exits_normally(tmp_path):
    """The files are written again at exit: when that fails (the folder went away during the run) the error
    is logged and the process exits with its own status. The exit handler used to log after spdlog's logger
    had been destroyed: a segfault (rc -11) after the script had finished."""
    import socket
    import subprocess
    import sys

    folder = tmp_path / "out"
    folder.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import os, shutil, torch, torch.distributed as dist, ringguard\n"
        f"os.environ.update(RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1', MASTER_PORT='{port}')\n"
        "dist.init_process_group('ringguard')\n"
        "dist.all_reduce(torch.ones(3))\n"
        f"shutil.rmtree({str(folder)!r})\n"
        "dist.destroy_process_group()\n"
        "print('END', flush=True)\n")
    env = dict(os.environ, RINGGUARD_SUMMARY=str(folder / "sum"), RINGGUARD_TIMELINE=str(folder / "tl"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"rc {r.returncode}: {r.stderr[-2000:]}"
    assert "END" in r.stdout
    assert f"cannot write {folder / 'tl'}.0.json" in r.stderr, r.stderr
    assert "observability at exit" in r.stderr, r.stderr


def test_a_launcher_that_imported_ringguard_does_not_replace_rank_0s_files(tmp_path):
    """ringguard-run imports ringguard (so the extension and its exit handler load in the launcher). The
    launcher has no rank, so its files would be ``<prefix>.0.json``, written after rank 0's: rank 0's summary
    and timeline came out empty. A process that recorded nothing writes no file."""
    import subprocess
    import sys

    script = tmp_path / "w.py"
    script.write_text("import torch, torch.distributed as dist\n"
                      "dist.init_process_group('ringguard')\n"
                      "dist.all_reduce(torch.ones(4))\n"
                      "dist.destroy_process_group()\n")
    env = dict(os.environ, RINGGUARD_TIMELINE=str(tmp_path / "tl"), RINGGUARD_SUMMARY=str(tmp_path / "sm"))
    r = subprocess.run([sys.executable, "-m", "ringguard.run", "--nproc-per-node=2", str(script)], env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        summary = json.loads((tmp_path / f"sm.{rank}.json").read_text())
        assert summary["rank"] == rank and len(summary["communicators"]) == 1, summary
        assert summary["communicators"][0]["collectives"]["allreduce"]["calls"] >= 1, summary
        timeline = json.loads((tmp_path / f"tl.{rank}.json").read_text())
        assert timeline["otherData"]["events"] > 0, timeline
