"""One torchrun launch per (test module, world size); the ranks run every case and report JSON lines.

Worker side (the test module run as a script under torchrun)::

    CASES = harness.Cases()

    @CASES.case("allreduce-f32")
    def _(ctx):            # ctx.rank, ctx.size, ctx.ref (a gloo group over all ranks), ctx.device
        ...                # raise on failure; harness.Skip / harness.XFail; return a JSON-able dict

    if __name__ == "__main__":
        harness.run_worker(CASES, init=...)

Each rank appends ``{"case", "rank", "status", "result", "error", "seconds"}`` to
``$RINGGUARD_TEST_OUT/rank<r>.jsonl`` after every case, then waits for the others on ``ctx.ref``, so
cases start together. pytest side: ``launch(script, nproc)`` runs torchrun once (cached for the session)
under a wall-clock limit, which is what proves "no hang"; ``results(launch, name)`` returns the
per-rank results of a case or fails the test with every rank's error and the log tail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

# Wall-clock limit of one launch (seconds); RINGGUARD_TEST_LAUNCH_TIMEOUT overrides.
LAUNCH_TIMEOUT = float(os.environ.get("RINGGUARD_TEST_LAUNCH_TIMEOUT", "300"))
INIT = "__init__"
TEARDOWN = "__teardown__"
DONE = "__done__"


class Skip(Exception):
    """Raised by a case: not applicable here (reported as a pytest skip)."""


class XFail(Exception):
    """Raised by a case: a known limitation (reported as a pytest xfail)."""


@dataclass
class Case:
    name: str
    fn: Callable
    check: Optional[Callable] = None  # pytest side: check(list of per-rank results, nproc)


class Cases:
    """An ordered registry of cases shared by the worker and the pytest side."""

    def __init__(self):
        self._cases: Dict[str, Case] = {}

    def case(self, name: str, check: Optional[Callable] = None):
        def deco(fn):
            self.add(name, fn, check)
            return fn
        return deco

    def add(self, name: str, fn: Callable, check: Optional[Callable] = None) -> None:
        if name in self._cases:
            raise ValueError(f"duplicate case {name}")
        self._cases[name] = Case(name, fn, check)

    @property
    def names(self) -> List[str]:
        return list(self._cases)

    def __getitem__(self, name: str) -> Case:
        return self._cases[name]

    def __iter__(self):
        return iter(self._cases.values())


# ----------------------------------------------------------------------------------------------------
# worker side


def native_threads() -> int:
    """Threads of this process, native ones included (/proc/self/task)."""
    return len(os.listdir("/proc/self/task"))


def ringguard_threads() -> list:
    """Names of the threads ringguard started (all are named "rg-...") that are still alive."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # ended while we looked
        if name.startswith("rg-"):
            names.append(name)
    return names


class Ctx:
    """What a case gets: rank, size, ref (gloo group over all ranks), device, and free attributes."""

    def __init__(self, rank: int, size: int, ref, device: str, threads_before_init: int):
        self.rank = rank
        self.size = size
        self.ref = ref
        self.device = device
        self.threads_before_init = threads_before_init


class _Reporter:
    def __init__(self, rank: int):
        out = os.environ["RINGGUARD_TEST_OUT"]
        self.file = open(os.path.join(out, f"rank{rank}.jsonl"), "a", buffering=1)
        self.rank = rank

    def write(self, name: str, status: str, result=None, error: str = "", seconds: float = 0.0):
        rec = {"case": name, "rank": self.rank, "status": status, "result": result, "error": error,
               "seconds": round(seconds, 3)}
        try:
            line = json.dumps(rec)
        except (TypeError, ValueError) as err:
            rec.update(status="fail", result=None, error=f"result is not JSON-able: {err}\n{error}")
            line = json.dumps(rec)
        self.file.write(line + "\n")
        self.file.flush()
        print(f"[rank {self.rank}] {name}: {status} ({rec['seconds']} s)"
              + (f"\n{error}" if status == "fail" else ""), flush=True)


def _error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=8)}"


def run_worker(cases: Cases, init: Callable[[], None], teardown: bool = True) -> None:
    """Runs every case on this rank. `init()` creates the default group (under torchrun)."""
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    rep = _Reporter(rank)
    device = os.environ.get("RINGGUARD_TEST_DEVICE", "cpu")
    threads0 = native_threads()
    t0 = time.monotonic()
    try:
        init()
        ref = dist.new_group(backend="gloo")
    except BaseException as err:  # noqa: BLE001 - reported, then the launch ends
        rep.write(INIT, "fail", error=_error_text(err), seconds=time.monotonic() - t0)
        raise
    rep.write(INIT, "ok", seconds=time.monotonic() - t0)
    ctx = Ctx(rank, size, ref, device, threads0)
    only = set(filter(None, os.environ.get("RINGGUARD_TEST_ONLY", "").split(",")))
    for case in cases:
        if only and case.name not in only:
            continue
        t0 = time.monotonic()
        try:
            result = case.fn(ctx)
            rep.write(case.name, "ok", result=result, seconds=time.monotonic() - t0)
        except Skip as err:
            rep.write(case.name, "skip", error=str(err), seconds=time.monotonic() - t0)
        except XFail as err:
            rep.write(case.name, "xfail", error=str(err), seconds=time.monotonic() - t0)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as err:  # noqa: BLE001 - a failing case (pytest.raises' "DID NOT RAISE" too,
            # a BaseException) must not stop the others or the rank's launch
            rep.write(case.name, "fail", error=_error_text(err), seconds=time.monotonic() - t0)
        if dist.is_initialized():
            dist.barrier(group=ctx.ref)  # gloo: lockstep between cases, whatever ringguard did
    if teardown and dist.is_initialized():
        t0 = time.monotonic()
        try:
            dist.destroy_process_group()
            rep.write(TEARDOWN, "ok", seconds=time.monotonic() - t0)
        except Exception as err:  # noqa: BLE001
            rep.write(TEARDOWN, "fail", error=_error_text(err), seconds=time.monotonic() - t0)
    rep.write(DONE, "ok")


# ----------------------------------------------------------------------------------------------------
# pytest side


@dataclass
class Launch:
    cmd: List[str]
    nproc: int
    rc: Optional[int]
    timed_out: bool
    seconds: float
    log: str
    records: Dict[str, Dict[int, dict]] = field(default_factory=dict)

    def tail(self, n: int = 6000) -> str:
        return self.log[-n:]

    def describe(self) -> str:
        state = f"timed out after {self.seconds:.0f} s (limit)" if self.timed_out else \
            f"exited rc={self.rc} after {self.seconds:.1f} s"
        return f"launch of {self.nproc} ranks {state}: {' '.join(self.cmd)}"


_cache: Dict[tuple, Launch] = {}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> List[int]:
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill_tree(proc: subprocess.Popen) -> None:
    """Ends the launcher and every process it started (by pid; the ranks run in their own sessions)."""
    pids = _descendants(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in [proc.pid] + pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.5)


def torchrun_cmd(script: str, nproc: int, args=(), port: Optional[int] = None) -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
            "--master-addr=127.0.0.1", f"--master-port={port or free_port()}", script, *args]


def run_command(cmd: List[str], env: Optional[Dict[str, str]] = None,
                timeout: float = LAUNCH_TIMEOUT) -> tuple:
    """Runs `cmd` under a wall-clock limit: (rc or None, timed_out, seconds, combined output)."""
    full_env = dict(os.environ)
    full_env.update({"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    full_env.update(env or {})
    with tempfile.TemporaryFile(mode="w+") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True)
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(proc)
            rc = proc.returncode
        seconds = time.monotonic() - t0
        log.seek(0)
        return rc, timed_out, seconds, log.read()


def launch(script: str, nproc: int, env: Optional[Dict[str, str]] = None, args=(),
           timeout: float = LAUNCH_TIMEOUT) -> Launch:
    """Runs `script` under torchrun with `nproc` ranks once per session; returns the records."""
    key = (os.path.abspath(script), nproc, tuple(sorted((env or {}).items())), tuple(args))
    if key in _cache:
        return _cache[key]
    out = tempfile.mkdtemp(prefix="ringguard-test-")
    cmd = torchrun_cmd(os.path.abspath(script), nproc, args)
    rc, timed_out, seconds, log = run_command(cmd, dict(env or {}, RINGGUARD_TEST_OUT=out), timeout)
    result = Launch(cmd, nproc, rc, timed_out, seconds, log)
    for r in range(nproc):
        path = os.path.join(out, f"rank{r}.jsonl")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    rec = json.loads(line)
                    result.records.setdefault(rec["case"], {})[rec["rank"]] = rec
    shutil.rmtree(out, ignore_errors=True)
    _cache[key] = result
    return result


def results(run: Launch, name: str) -> List:
    """Per-rank results of case `name`; fails/skips/xfails the calling test as the ranks reported."""
    import pytest

    recs = run.records.get(name, {})
    init = run.records.get(INIT, {})
    init_errors = [f"rank {r}: {rec['error']}" for r, rec in sorted(init.items()) if rec["status"] != "ok"]
    if init_errors:
        pytest.fail(f"init_process_group failed\n" + "\n".join(init_errors) + f"\n{run.describe()}")
    missing = [r for r in range(run.nproc) if r not in recs]
    if missing:
        pytest.fail(f"case {name}: no result from rank(s) {missing}; {run.describe()}\n"
                    f"--- log tail ---\n{run.tail()}")
    failed = [f"rank {r}: {recs[r]['error']}" for r in range(run.nproc) if recs[r]["status"] == "fail"]
    if failed:
        pytest.fail(f"case {name} failed\n" + "\n".join(failed))
    statuses = {recs[r]["status"] for r in range(run.nproc)}
    if "xfail" in statuses:
        pytest.xfail("; ".join(sorted({recs[r]["error"] for r in range(run.nproc) if recs[r]["error"]})))
    if statuses == {"skip"}:
        pytest.skip(recs[0]["error"])
    if "skip" in statuses:
        pytest.fail(f"case {name}: skipped on some ranks only: {statuses}")
    return [recs[r]["result"] for r in range(run.nproc)]


def check_case(cases: Cases, run: Launch, name: str) -> None:
    """`results` plus the case's own pytest-side check."""
    res = results(run, name)
    case = cases[name]
    if case.check is not None:
        case.check(res, run.nproc)


def check_launch(run: Launch) -> None:
    """The launch ended by itself, every rank finished and tore down cleanly."""
    assert not run.timed_out, f"{run.describe()}\n--- log tail ---\n{run.tail()}"
    done = run.records.get(DONE, {})
    assert sorted(done) == list(range(run.nproc)), \
        f"ranks that finished: {sorted(done)}; {run.describe()}\n--- log tail ---\n{run.tail()}"
    teardown = run.records.get(TEARDOWN, {})
    bad = {r: rec["error"] for r, rec in teardown.items() if rec["status"] != "ok"}
    assert not bad, f"destroy_process_group failed: {bad}"
    assert run.rc == 0, f"{run.describe()}\n--- log tail ---\n{run.tail()}"


# Message matching for "the error names op, dtype and device": the extension may use torch's names
# (float32, Float), ringguard's (f32) or c10's (Float/Int/Long/...).
DTYPE_ALIASES = {
    "float32": ("float32", "float", "f32"),
    "float64": ("float64", "double", "f64"),
    "float16": ("float16", "half", "f16"),
    "bfloat16": ("bfloat16", "bf16"),
    "int32": ("int32", "int", "i32"),
    "int64": ("int64", "long", "i64"),
    "uint8": ("uint8", "byte", "u8"),
    "int16": ("int16", "short", "i16"),
    "int8": ("int8", "char", "i8"),
    "bool": ("bool",),
    "complex64": ("complex64", "complexfloat", "complex"),
}


def names_word(message: str, aliases) -> bool:
    """True if one of `aliases` occurs in `message` as a word (case-insensitive)."""
    import re

    return any(re.search(rf"(?<![A-Za-z0-9]){re.escape(a)}(?![A-Za-z0-9])", message, re.IGNORECASE)
               for a in aliases)


def device_transport(size: int) -> str:
    """The transport ringguard.transport("cuda") names once a CUDA collective ran on `size` ranks launched by
    this harness (every rank on one host): RINGGUARD_DEVICE_TRANSPORT as asked, where "auto" (the default)
    maps the peer windows for two ranks or more (docs/GPU.md, "The one-sided path"; none of the callers sets
    RINGGUARD_NAN_CHECK, which keeps them off the windows) and leaves one rank on NCCL."""
    want = os.environ.get("RINGGUARD_DEVICE_TRANSPORT", "auto")
    if want == "auto":
        want = "peer" if size > 1 else "nccl"
    return want
