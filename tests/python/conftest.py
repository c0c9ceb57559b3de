"""pytest configuration of the ringguard Python tests (see harness.py for how ranks are launched)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402


SLOW_CASE_S = 5.0  # a case this long (its slowest rank) is listed under its launch


def pytest_report_header(config):
    return f"ringguard: one torchrun launch per module and world size, limit {harness.LAUNCH_TIMEOUT:.0f} s each"


def pytest_terminal_summary(terminalreporter):
    if not harness._cache:
        return
    terminalreporter.write_sep("-", "ringguard launches")
    for run in harness._cache.values():
        script = next((os.path.basename(a) for a in run.cmd if a.endswith(".py")), "?")
        terminalreporter.write_line(f"{run.seconds:6.1f} s  np={run.nproc}  rc={run.rc}"
                                    f"{'  TIMED OUT' if run.timed_out else ''}  {script}")
        # The cases that took most of a slow launch (the slowest rank's time), so that a run on another
        # machine says where its time went without the records, which are gone with the launch.
        slow = sorted(((max(rec["seconds"] for rec in recs.values()), name) for name, recs in run.records.items()
                       if recs), reverse=True)
        for seconds, name in slow[:3]:
            if seconds >= SLOW_CASE_S:
                terminalreporter.write_line(f"{'':8}{seconds:6.1f} s  {name}")
