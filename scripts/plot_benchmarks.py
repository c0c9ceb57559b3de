#!/usr/bin/env python3
"""Turns the benchmarks' recorded output into the PNG plots of docs/PERFORMANCE.md ("Plots").

    python3 scripts/plot_benchmarks.py                      # every file in bench/results -> docs/plots
    python3 scripts/plot_benchmarks.py -o /tmp/p bench/results/collectives_host_np2_allreduce.run1.log

Inputs, by kind (bench/results/README.md says where each one came from):

- ``*.log``: stdout of ``bench_collectives`` (or ``bench_allreduce``), any '#' lines above it (the command,
  machine, date, load). Logs with the same memory, transport and rank count make one busbw figure (one
  panel per collective, ringguard against its peer; repeated runs thin, their median bold) and one ratio
  figure (peer time / ringguard time, and the share of ringguard's time rank 0 spent in apply: verify +
  reduce or copy).
- ``*.jsonl``: the output of ``bench/policy_replay.py`` (a signal trace replayed through the downgrade
  engine): one figure with each signal (and the thresholds of the conditions that read it) and each
  family's variant over the steps, decisions marked.
- ``<name>.<rank>.json``: ringguard timelines (``RINGGUARD_TIMELINE``, Chrome trace JSON) of a real run,
  the files of one run (same name, one per rank) making one figure: every telemetry counter track that
  varies, the downgrade decisions marked on them, and each rank's collectives over time with their
  detections, retransmissions and repair rounds.
- ``*.csv``: figures recorded only as numbers in the docs, each file naming its source section in a
  ``# source:`` line. ``# kind: times`` (op, np, bytes, ringguard_us, peer_us) gives a busbw figure,
  ``# kind: ratio`` (op, np, bytes, ratio) a ratio figure, ``# kind: bars`` (panel, label, ms) a bar
  chart of times (the guard's overhead).

A line that fits none of these formats is an error naming the file and the line (exit status 2). Needs
matplotlib (``scripts/install_deps.sh`` installs it); the Agg backend, no display.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = ["allreduce", "reduce_scatter", "allgather", "broadcast", "alltoall", "sendrecv"]
RG_COLOUR, PEER_COLOUR = "tab:blue", "tab:orange"
OP_COLOURS = dict(zip(OPS, ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]))


class InputError(Exception):
    """A benchmark output that cannot be read: the message names the file and the line."""


def fail(path: str, lineno: int, what: str, line: str = "") -> InputError:
    shown = f": {excerpt(line.rstrip())}" if line else ""
    return InputError(f"{path}:{lineno}: {what}{shown}")


def excerpt(text: str, limit: int = 80) -> str:
    """repr(text), cut in the middle to about `limit` characters: errors quote input, which can be any size."""
    shown = repr(text)
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit // 2]}...({len(text)} characters)...{shown[-(limit // 2):]}"


# Inputs are read whole: a recorded timeline is a few hundred kilobytes (the recorder's buffer is bounded).
MAX_INPUT_BYTES = 512 << 20
# A Chrome trace nests five deep (object, traceEvents, event, args, a value); a policy record four.
MAX_JSON_DEPTH = 16
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def read_input(path: str) -> str:
    """The text of `path`: only a regular file (checked with stat before it is opened, and on the descriptor,
    opened without blocking: a FIFO would wait for a writer for good), at most MAX_INPUT_BYTES, UTF-8."""
    def check(st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
            raise InputError(f"{path}:0: is {kind}, not a regular file")
        if st.st_size > MAX_INPUT_BYTES:
            raise InputError(f"{path}:0: {st.st_size} bytes, above the limit of {MAX_INPUT_BYTES}")

    try:
        check(os.stat(path))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise InputError(f"{path}:0: cannot be read ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        check(os.fstat(fd))
        data = f.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"{path}:0: larger than the limit of {MAX_INPUT_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}:0: byte {e.start} is not UTF-8 ({e.reason})") from None


def json_value(text: str, path: str, lineno: int):
    """`text` as JSON, nested at most MAX_JSON_DEPTH deep (Python's parser and everything that walks its
    result recurse: 100000 nested brackets are a RecursionError, or worse, far from here)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise fail(path, lineno + e.lineno - 1 if lineno else e.lineno, f"not JSON ({e.msg})") from None
    except RecursionError:
        obj = None
    else:
        level = [obj]  # the values at one depth; the walk is iterative
        for _ in range(MAX_JSON_DEPTH):
            level = [c for v in level if isinstance(v, (dict, list))
                     for c in (v.values() if isinstance(v, dict) else v)]
            if not level:
                return obj
    raise fail(path, lineno, f"nested deeper than the limit of {MAX_JSON_DEPTH} levels")


# ---------------------------------------------------------------------------------------------------------
# bench_collectives / bench_allreduce logs

HEADER_RE = re.compile(r"^# ringguard (bench_collectives|bench_allreduce): (.*)$")
COLUMNS_RE = re.compile(r"^\s*bytes\s+count\s*\|")
BREAKDOWN_RE = re.compile(
    r"^\s+breakdown/call: transfer_wait=([0-9.]+) ms apply=([0-9.]+) ms executor_wait=([0-9.]+) ms\s*$")
SUMMARY_RE = re.compile(r"^summary: ")
NUMBER_RE = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")


@dataclass
class Row:
    bytes: int
    rg_us: float
    peer_us: float
    rg_busbw: float
    peer_busbw: float
    ratio: float
    ctl: Optional[float]
    check: str
    apply_ms: Optional[float] = None
    transfer_wait_ms: Optional[float] = None


@dataclass
class BenchLog:
    path: str
    params: Dict[str, str]
    comments: List[str] = field(default_factory=list)
    rows: List[Row] = field(default_factory=list)

    @property
    def op(self) -> str:
        return self.params.get("op", "allreduce")  # bench_allreduce has no op= field

    @property
    def key(self) -> Tuple[str, str, str, int]:
        return (self.params.get("memory", "host"), self.params.get("transport", "mpi"),
                self.params.get("peer", "mpi"), int(self.params.get("np", "0")))


def parse_bench_log(path: str, text: Optional[str] = None) -> BenchLog:
    """Reads one bench_collectives / bench_allreduce stdout (with '#' lines above it)."""
    if text is None:
        text = read_input(path)
    log: Optional[BenchLog] = None
    comments: List[str] = []
    columns: Optional[List[str]] = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = HEADER_RE.match(line)
        if m:
            if log is not None:
                raise fail(path, lineno, "a second benchmark header (one run per log)", line)
            params = {}
            for item in m.group(2).split():
                if "=" not in item:
                    raise fail(path, lineno, f"header field '{item}' is not key=value", line)
                k, v = item.split("=", 1)
                params[k] = v
            if not NUMBER_RE.match(params.get("np", "")):
                raise fail(path, lineno, "header has no np=<ranks>", line)
            log = BenchLog(path, params, comments)
            continue
        if line.startswith("#"):
            comments.append(line[1:].strip())
            continue
        if COLUMNS_RE.match(line):
            if log is None:
                raise fail(path, lineno, "column header before the '# ringguard bench_...:' line", line)
            columns = [c for c in line.split() if c != "|"]
            need = {"bytes", "rg_us", "rg_busbw", "ratio", "check"}
            if not need.issubset(columns) or not any(c.endswith("_us") and c != "rg_us" for c in columns):
                raise fail(path, lineno, "column header lacks bytes, rg_us, rg_busbw, a peer _us column, "
                           "ratio or check", line)
            continue
        m = BREAKDOWN_RE.match(line)
        if m:
            if log is None or not log.rows:
                raise fail(path, lineno, "breakdown line before any table row", line)
            log.rows[-1].transfer_wait_ms = float(m.group(1))
            log.rows[-1].apply_ms = float(m.group(2))
            continue
        if SUMMARY_RE.match(line):
            continue
        tokens = [t for t in line.split() if t != "|"]
        if columns is not None and len(tokens) == len(columns) and NUMBER_RE.match(tokens[0]):
            values = dict(zip(columns, tokens))
            try:
                peer_us = next(values[c] for c in columns if c.endswith("_us") and c != "rg_us")
                peer_bus = next(values[c] for c in columns if c.endswith("_bus") or
                                (c.endswith("_busbw") and c != "rg_busbw"))
                row = Row(bytes=int(values["bytes"]), rg_us=float(values["rg_us"]), peer_us=float(peer_us),
                          rg_busbw=float(values["rg_busbw"]), peer_busbw=float(peer_bus),
                          ratio=float(values["ratio"]),
                          ctl=float(values["ctl/coll"]) if "ctl/coll" in values else None,
                          check=values["check"])
            except (ValueError, StopIteration):
                raise fail(path, lineno, "table row with a non-numeric field", line) from None
            if row.check == "FAIL":
                print(f"plot_benchmarks: warning: {path}:{lineno}: results differed from the peer (check FAIL)",
                      file=sys.stderr)
            log.rows.append(row)
            continue
        where = "before the column header" if columns is None else f"of {len(tokens)} fields, not {len(columns)}"
        raise fail(path, lineno, f"not a line of a bench_collectives log ({where})", line)
    if log is None:
        raise fail(path, 0, "no '# ringguard bench_collectives: ...' header (is this a bench_collectives stdout?)")
    if not log.rows:
        raise fail(path, 0, "no table rows")
    return log


# ---------------------------------------------------------------------------------------------------------
# CSV of figures recorded in the docs

@dataclass
class CsvTable:
    path: str
    meta: Dict[str, str]
    rows: List[Dict[str, str]]


CSV_COLUMNS = {"times": ["op", "np", "bytes", "ringguard_us", "peer_us"],
               "ratio": ["op", "np", "bytes", "ratio"],
               "bars": ["panel", "label", "ms"]}
CSV_NUMERIC = {"np", "bytes", "ringguard_us", "peer_us", "ratio", "ms"}


def parse_csv(path: str) -> CsvTable:
    meta: Dict[str, str] = {}
    body: List[Tuple[int, str]] = []
    for lineno, line in enumerate(io.StringIO(read_input(path), newline=None), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            if ":" in line:
                k, v = line[1:].split(":", 1)
                meta[k.strip()] = (meta.get(k.strip(), "") + " " + v.strip()).strip()
            continue
        body.append((lineno, line))
    kind = meta.get("kind")
    if kind not in CSV_COLUMNS:
        raise fail(path, 1, f"no '# kind: {'|'.join(CSV_COLUMNS)}' line")
    if not meta.get("source"):
        raise fail(path, 1, "no '# source:' line naming where the figures were measured")
    if not body:
        raise fail(path, 0, "no CSV header and rows")
    header_no, header = body[0]
    names = next(csv.reader([header]))
    names = [n.strip() for n in names]
    if names != CSV_COLUMNS[kind]:
        raise fail(path, header_no, f"a '{kind}' CSV has the columns {','.join(CSV_COLUMNS[kind])}", header)
    rows = []
    for lineno, line in body[1:]:
        fields = [x.strip() for x in next(csv.reader([line]))]
        if len(fields) != len(names):
            raise fail(path, lineno, f"{len(fields)} fields, not {len(names)}", line)
        row = dict(zip(names, fields))
        for n in names:
            if n in CSV_NUMERIC and not NUMBER_RE.match(row[n]):
                raise fail(path, lineno, f"'{n}' is not a number", line)
        rows.append(row)
    if not rows:
        raise fail(path, 0, "no data rows")
    return CsvTable(path, meta, rows)


# ---------------------------------------------------------------------------------------------------------
# Policy replays (bench/policy_replay.py)

@dataclass
class PolicyReplay:
    path: str
    meta: dict
    steps: List[dict]
    decisions: List[dict]
    check: Optional[dict]


def parse_policy(path: str) -> PolicyReplay:
    meta, steps, decisions, check = None, [], [], None
    for lineno, line in enumerate(io.StringIO(read_input(path), newline=None), 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            obj = json_value(line, path, lineno)
        except InputError as e:
            raise InputError(f"{e}: {excerpt(line.rstrip())}") from None
        kind = obj.get("kind") if isinstance(obj, dict) else None
        if kind == "meta":
            meta = obj
        elif kind == "step":
            if "signals" not in obj or "current" not in obj or "step" not in obj:
                raise fail(path, lineno, "a step record needs step, signals and current", line)
            steps.append(obj)
        elif kind == "decision":
            decisions.append(obj)
        elif kind == "check":
            check = obj
        elif kind != "counters":
            raise fail(path, lineno, "not a bench/policy_replay.py record (kind meta, step, decision, "
                       "counters or check)", line)
    if meta is None:
        raise fail(path, 0, "no {\"kind\": \"meta\"} record (is this bench/policy_replay.py output?)")
    if not steps:
        raise fail(path, 0, "no step records")
    return PolicyReplay(path, meta, steps, decisions, check)


# ---------------------------------------------------------------------------------------------------------
# Timelines of real runs (RINGGUARD_TIMELINE: docs/GUIDE.md, "Reading a timeline and a summary")

@dataclass
class Timeline:
    path: str
    rank: int
    events: List[dict]


def parse_timeline(path: str) -> Timeline:
    obj = json_value(read_input(path), path, 0)
    if not isinstance(obj, dict) or not isinstance(obj.get("traceEvents"), list):
        raise fail(path, 0, "not a ringguard timeline (a JSON object with traceEvents)")
    other = obj.get("otherData", {})
    if other.get("producer") != "ringguard":
        raise fail(path, 0, "otherData.producer is not 'ringguard' (is this a RINGGUARD_TIMELINE file?)")
    for i, e in enumerate(obj["traceEvents"]):
        if not isinstance(e, dict) or "ph" not in e or (e["ph"] != "M" and "ts" not in e):
            raise fail(path, 0, f"traceEvents[{i}] has no ph or ts: {e!r:.120}")
    return Timeline(path, int(other.get("rank", 0)), obj["traceEvents"])


def timeline_run(path: str) -> str:
    """The run a timeline file belongs to: its name without '.<rank>.json'."""
    return re.sub(r"\.\d+\.json$", "", os.path.basename(path))


# ---------------------------------------------------------------------------------------------------------
# Figures

def size_label(b: float) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div:
            v = b / div
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{b:.0f}"


def size_axis(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(v)))
    ax.set_xlabel("size (bytes)")
    ax.grid(True, which="major", alpha=0.3)


def save(fig, out_dir: str, name: str, written: List[str]) -> None:
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)


def op_order(op: str) -> int:
    return OPS.index(op) if op in OPS else len(OPS)


def peer_name(peer: str) -> str:
    return {"mpi": "MPI", "nccl": "NCCL", "mpi_staged": "copy + MPI + copy"}.get(peer, peer)


def median(values: List[float]) -> float:
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def by_size(runs: List[BenchLog], value) -> Tuple[List[int], List[float]]:
    """Sizes every run has, and the median over the runs of value(row) at each."""
    sizes = sorted(set.intersection(*(set(r.bytes for r in log.rows if value(r) is not None) for log in runs)))
    return sizes, [median([value(r) for log in runs for r in log.rows if r.bytes == b]) for b in sizes]


def runs_footnote(group: List[BenchLog]) -> str:
    """Machine, dates and the load the runs recorded about themselves."""
    comments = [c for log in group for c in log.comments]
    machine = next((c for c in comments if c.startswith("machine:")), "")
    dates = sorted({c.split(",")[0] for c in comments if c.startswith("date:")})
    busy = [int(m.group(1)) for c in comments for m in [re.search(r"CPUs (\d+)% busy", c)] if m]
    others = [float(m.group(1)) for c in comments for m in [re.search(r"during the run.*mean ([0-9.]+)", c)] if m]
    lines = [machine, f"{len(group)} runs; " + (f"{dates[0]} .. {dates[-1][len('date: '):]}" if dates else "")]
    if busy:
        lines.append(f"CPUs {min(busy)}-{max(busy)}% busy in the second before each run; other runnable "
                     f"processes during the runs: mean {min(others, default=0):g}-{max(others, default=0):g} "
                     "(the cores are shared with other jobs)")
    return "\n".join(l for l in lines if l)


def plot_collective_logs(logs: List[BenchLog], out_dir: str, written: List[str]) -> None:
    """One busbw and one ratio figure per (memory, transport, peer, ranks); repeated runs of a collective are
    drawn thin and their median bold."""
    groups: Dict[Tuple[str, str, str, int], Dict[str, List[BenchLog]]] = {}
    for log in logs:
        groups.setdefault(log.key, {}).setdefault(log.op, []).append(log)
    for (memory, transport, peer, n), ops in sorted(groups.items()):
        names = sorted(ops, key=op_order)
        stem = f"{memory}_{transport}_np{n}"
        foot = runs_footnote([log for op in names for log in ops[op]])
        cols = min(3, len(names))
        rows = math.ceil(len(names) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows + 0.9), squeeze=False)
        for ax, op in zip(axes.flat, names):
            runs = ops[op]
            for log in runs if len(runs) > 1 else []:
                x = [r.bytes for r in log.rows]
                ax.plot(x, [r.rg_busbw for r in log.rows], "-", color=RG_COLOUR, lw=0.7, alpha=0.35)
                ax.plot(x, [r.peer_busbw for r in log.rows], "--", color=PEER_COLOUR, lw=0.7, alpha=0.35)
            med = " (median of runs)" if len(runs) > 1 else ""
            x, y = by_size(runs, lambda r: r.rg_busbw)
            ax.plot(x, y, "o-", color=RG_COLOUR, label="ringguard (verified)" + med)
            x, y = by_size(runs, lambda r: r.peer_busbw)
            ax.plot(x, y, "s--", color=PEER_COLOUR, label=peer_name(peer) + med)
            size_axis(ax)
            ax.set_ylabel("busbw (GB/s)")
            ax.set_title(op + (f" ({len(runs)} runs)" if len(runs) > 1 else ""))
        for ax in list(axes.flat)[len(names):]:
            ax.axis("off")
        axes.flat[0].legend(loc="upper left", fontsize=7)
        fig.suptitle(f"bench_collectives, {memory} memory, {transport} transport, {n} ranks: "
                     f"busbw (nccl-tests factors)")
        fig.text(0.01, 0.005, foot, fontsize=6, va="bottom", family="monospace")
        fig.tight_layout(rect=(0, 0.07, 1, 0.95))
        save(fig, out_dir, f"busbw_{stem}.png", written)

        # ratio, and the share of ringguard's time spent verifying + applying
        with_apply = [op for op in names if any(r.apply_ms is not None for log in ops[op] for r in log.rows)]
        fig, axes = plt.subplots(1, 2 if with_apply else 1, figsize=(12 if with_apply else 6.5, 4.8),
                                 squeeze=False)
        ax = axes[0][0]
        for op in names:
            for log in ops[op] if len(ops[op]) > 1 else []:
                ax.plot([r.bytes for r in log.rows], [r.ratio for r in log.rows], "-", lw=0.6, alpha=0.35,
                        color=OP_COLOURS.get(op))
            ax.plot(*by_size(ops[op], lambda r: r.ratio), "o-", label=op, color=OP_COLOURS.get(op))
        ax.axhline(1.0, color="black", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        size_axis(ax)
        ax.set_ylabel(f"{peer_name(peer)} time / ringguard time (> 1: ringguard faster)")
        ax.set_title(f"ringguard_vs_{peer}" + (" (median bold, runs thin)" if any(len(v) > 1 for v in ops.values())
                                               else ""))
        ax.legend(fontsize=8)
        if with_apply:
            ax = axes[0][1]
            share = lambda r: None if r.apply_ms is None else 1e3 * r.apply_ms / r.rg_us  # noqa: E731
            for op in with_apply:
                ax.plot(*by_size(ops[op], share), "o-", label=op, color=OP_COLOURS.get(op))
            size_axis(ax)
            ax.set_ylim(0, 1)
            ax.set_ylabel("apply time / collective time (rank 0, median of runs)")
            ax.set_title("share in apply: CRC verify + reduce or copy")
            ax.legend(fontsize=8)
        fig.suptitle(f"bench_collectives, {memory} memory, {transport} transport, {n} ranks")
        fig.text(0.01, 0.005, foot, fontsize=6, va="bottom", family="monospace")
        fig.tight_layout(rect=(0, 0.1, 1, 0.95))
        save(fig, out_dir, f"ratio_{stem}.png", written)


def csv_stem(table: CsvTable) -> str:
    return os.path.splitext(os.path.basename(table.path))[0]


def plot_csv_times(table: CsvTable, out_dir: str, written: List[str]) -> None:
    series: Dict[Tuple[str, int], List[dict]] = {}
    for r in table.rows:
        series.setdefault((r["op"], int(r["np"])), []).append(r)
    fig, ax = plt.subplots(figsize=(7, 4.8))
    peer = table.meta.get("peer", "peer")
    for (op, n), rows in sorted(series.items()):
        factor = 2.0 * (n - 1) / n if op == "allreduce" else (n - 1) / n if op in OPS[1:3] + ["alltoall"] else 1.0
        x = [float(r["bytes"]) for r in rows]
        rg = [float(r["bytes"]) / float(r["ringguard_us"]) / 1e3 * factor for r in rows]
        pe = [float(r["bytes"]) / float(r["peer_us"]) / 1e3 * factor for r in rows]
        ax.plot(x, rg, "o-", color=RG_COLOUR, label=f"ringguard {op} (np {n})")
        ax.plot(x, pe, "s--", color=PEER_COLOUR, label=f"{peer_name(peer)} {op} (np {n})")
    size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("busbw (GB/s)")
    ax.legend(fontsize=8)
    ax.set_title(table.meta.get("title", csv_stem(table)), fontsize=10)
    fig.text(0.01, 0.005, "source: " + table.meta["source"], fontsize=6, va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(fig, out_dir, f"{csv_stem(table)}.png", written)


def plot_csv_ratio(table: CsvTable, out_dir: str, written: List[str]) -> None:
    series: Dict[Tuple[str, int], List[dict]] = {}
    for r in table.rows:
        series.setdefault((r["op"], int(r["np"])), []).append(r)
    nps = sorted({n for _, n in series})
    fig, axes = plt.subplots(1, len(nps), figsize=(6 * len(nps), 4.6), squeeze=False, sharey=True)
    for ax, n in zip(axes[0], nps):
        for (op, m), rows in sorted(series.items(), key=lambda kv: op_order(kv[0][0])):
            if m != n:
                continue
            ax.plot([float(r["bytes"]) for r in rows], [float(r["ratio"]) for r in rows], "o-", label=op,
                    color=OP_COLOURS.get(op))
        ax.axhline(1.0, color="black", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        size_axis(ax)
        ax.set_title(f"{n} ranks")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel(f"{peer_name(table.meta.get('peer', 'peer'))} time / ringguard time")
    fig.suptitle(table.meta.get("title", csv_stem(table)), fontsize=10)
    fig.text(0.01, 0.005, "source: " + table.meta["source"], fontsize=6, va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    save(fig, out_dir, f"{csv_stem(table)}.png", written)


def plot_csv_bars(table: CsvTable, out_dir: str, written: List[str]) -> None:
    panels: Dict[str, List[dict]] = {}
    for r in table.rows:
        panels.setdefault(r["panel"], []).append(r)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8.5, 1.0 + 0.55 * len(table.rows) + 0.6 * len(panels)),
                             squeeze=False, gridspec_kw={"height_ratios": [len(v) for v in panels.values()]})
    for ax, (panel, rows) in zip(axes[:, 0], panels.items()):
        labels = [r["label"] for r in rows][::-1]
        values = [float(r["ms"]) for r in rows][::-1]
        shown = [r["ms"] for r in rows][::-1]  # as recorded, with the docs' precision
        bars = ax.barh(labels, values, color=["tab:gray" if i == len(values) - 1 else "tab:blue"
                                              for i in range(len(values))])
        base = float(rows[0]["ms"])
        for b, v, text in zip(bars, values, shown):
            ax.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {text} ms ({v / base:.2f}x)",
                    va="center", fontsize=8)
        ax.set_xlim(0, max(values) * 1.35)
        ax.set_xlabel("ms")
        ax.set_title(panel, fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(table.meta.get("title", csv_stem(table)), fontsize=10)
    fig.text(0.01, 0.005, "source: " + table.meta["source"], fontsize=6, va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    save(fig, out_dir, f"{csv_stem(table)}.png", written)


def conditions_by_signal(rules: dict) -> Dict[str, List[Tuple[str, str, str, float, float]]]:
    """signal -> [(family, variant, above|below, enter, exit)] from the rules the replay loaded."""
    out: Dict[str, List[Tuple[str, str, str, float, float]]] = {}
    for family, fam in rules.get("families", {}).items():
        for v in fam.get("variants", []):
            for c in v.get("when", []):
                for sense in ("above", "below"):
                    if sense in c:
                        enter = float(c[sense]["enter"])
                        out.setdefault(c["signal"], []).append(
                            (family, v["name"], sense, enter, float(c[sense].get("exit", enter))))
    return out


def plot_policy(rep: PolicyReplay, out_dir: str, written: List[str]) -> None:
    signals = sorted({s for st in rep.steps for s in st["signals"]})
    families = list(rep.meta.get("families", {}))
    conds = conditions_by_signal(rep.meta.get("rules", {}))
    n = len(signals) + len(families)
    fig, axes = plt.subplots(n, 1, figsize=(9, 1.8 * n + 1.2), sharex=True, squeeze=False)
    steps = [st["step"] for st in rep.steps]
    for ax, sig in zip(axes[:, 0], signals):
        vals = [st["signals"].get(sig) for st in rep.steps]
        ax.plot(steps, [v if v is not None else math.nan for v in vals], "o-", color="tab:blue", ms=4)
        missing = [s for s, v in zip(steps, vals) if v is None]
        if missing:
            lo = min((v for v in vals if v is not None), default=0)
            ax.plot(missing, [lo] * len(missing), "x", color="tab:red", label="missing")
            ax.legend(fontsize=7, loc="upper left")
        for family, variant, sense, enter, exit_ in conds.get(sig, []):
            ax.axhline(enter, color="tab:green", ls="--", lw=0.8)
            ax.text(steps[-1] + 0.3, enter, f"{variant} enter {enter:g}", fontsize=6, va="center", color="tab:green")
            if exit_ != enter:
                ax.axhline(exit_, color="tab:olive", ls=":", lw=0.8)
                ax.text(steps[-1] + 0.3, exit_, f"{variant} exit {exit_:g}", fontsize=6, va="center",
                        color="tab:olive")
        ax.set_ylabel(f"signal\n{sig}", fontsize=8)
        ax.grid(True, alpha=0.3)
    for ax, family in zip(axes[len(signals):, 0], families):
        variants = rep.meta["families"][family]["variants"]
        cur = [variants.index(st["current"][family]) if st["current"].get(family) in variants else math.nan
               for st in rep.steps]
        ax.step(steps, cur, where="post", color="tab:purple")
        ax.set_yticks(range(len(variants)))
        ax.set_yticklabels(variants, fontsize=7)
        ax.set_ylim(-0.5, len(variants) - 0.5)
        for d in rep.decisions:
            if d["family"] == family and d["from"]:
                y = variants.index(d["to"]) if d["to"] in variants else 0
                ax.plot(d["step"], y, "v", color="tab:red", ms=6)
                ax.annotate(f"{d['from']} -> {d['to']}", (d["step"], y), textcoords="offset points",
                            xytext=(3, 5), fontsize=6)
        ax.set_ylabel(f"{family}\n({rep.meta['families'][family].get('scope', 'local')})", fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    trace = os.path.basename(rep.meta.get("trace", "?"))
    verdict = ""
    if rep.check is not None:
        verdict = " (decisions equal its .expected)" if rep.check.get("match") else " (decisions DIFFER from .expected)"
    fig.suptitle(f"downgrade engine replaying {trace} under {os.path.basename(rep.meta.get('rules_file', '?'))}"
                 f"{verdict}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.93, 0.97))
    save(fig, out_dir, f"policy_{os.path.splitext(trace)[0]}.png", written)


DECISION = re.compile(r"step (\d+) (\S+): (\S+) -> (\S+)")


def plot_timeline(run_name: str, files: List[Timeline], out_dir: str, written: List[str]) -> None:
    events = [e for t in files for e in t.events if e["ph"] != "M"]
    t0 = min(e["ts"] for e in events)
    sec = lambda e: (e["ts"] - t0) / 1e6  # noqa: E731  (trace timestamps are microseconds)
    counters: Dict[str, List[Tuple[float, float]]] = {}
    for e in events:
        if e["ph"] == "C":
            for k, v in e.get("args", {}).items():
                counters.setdefault(k, []).append((sec(e), float(v)))
    varying = sorted(k for k, pts in counters.items() if len({v for _, v in pts}) > 1)
    # The signals rules read (utilisation, fragmentation) when the run has them; every varying track if not.
    read = [k for k in varying if k.endswith("util") or "fragmentation" in k]
    varying = read or varying
    decisions = [(sec(e), e["args"].get("detail", "")) for e in events if e.get("cat") == "downgrade"]
    switches = [(t, d) for t, d in decisions if "(initial)" not in d]
    spans = [e for e in events if e["ph"] == "X" and e.get("cat") == "collective"]
    n = len(varying) + (1 if spans else 0)
    if n == 0:
        raise InputError(f"{files[0].path}:0: the timeline has no varying counter track and no collective")
    fig, axes = plt.subplots(n, 1, figsize=(10, 1.9 * n + 1.3), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], varying):
        pts = counters[name]
        ax.plot([t for t, _ in pts], [v for _, v in pts], "-", color="tab:blue", lw=1)
        ax.set_ylabel(name, fontsize=8)
        ax.grid(True, alpha=0.3)
    for ax in axes[:, 0]:
        for t, d in switches:
            ax.axvline(t, color="tab:red", ls="--", lw=0.8)
    for i, (t, d) in enumerate(switches):  # labelled once, on the top panel, staggered
        m = DECISION.search(d)
        label = f"{m.group(2)}: {m.group(3)} -> {m.group(4)} (step {m.group(1)})" if m else d[:40]
        axes[0, 0].annotate(label, (t, 0.92 - 0.14 * (i % 4)), xycoords=("data", "axes fraction"), fontsize=6,
                            ha="left", color="tab:red", xytext=(3, 0), textcoords="offset points")
    if spans:
        ax = axes[-1, 0]
        ranks = sorted({t.rank for t in files})
        for t in files:
            mine = [e for e in t.events if e["ph"] == "X" and e.get("cat") == "collective"]
            ax.broken_barh([(sec(e), max(e.get("dur", 0) / 1e6, 1e-4)) for e in mine], (t.rank - 0.3, 0.6),
                           color=[OP_COLOURS.get(e["name"], "tab:gray") for e in mine])
            for row, (cat, marker, colour, label) in enumerate((("detect", "x", "black", "detected"),
                                                                 ("retransmit", "^", "tab:olive", "retransmitted"),
                                                                 ("repair", "s", "tab:purple", "repair round"))):
                pts = [sec(e) for e in t.events if e.get("cat") == cat and e["ph"] in ("i", "X")]
                if pts:
                    ax.plot(pts, [t.rank + 0.4 + 0.17 * row] * len(pts), marker, color=colour, ms=6, ls="",
                            label=f"{label} (rank {t.rank}: {len(pts)})")
        ax.set_yticks(ranks)
        ax.set_yticklabels([f"rank {r}" for r in ranks], fontsize=8)
        ax.set_ylim(min(ranks) - 0.6, max(ranks) + 1.0)
        kinds = sorted({e["name"] for e in spans}, key=op_order)
        for k in kinds:  # legend entries for the bar colours
            ax.plot([], [], "s", color=OP_COLOURS.get(k, "tab:gray"), label=k)
        ax.set_ylabel("collectives", fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the first event")
    fig.suptitle(f"timeline of {run_name} ({len(files)} rank file(s); {len(switches)} downgrade switch(es), "
                 f"{len(spans)} collectives)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.88, 0.97))  # room on the right for the labels and the legend
    save(fig, out_dir, f"{run_name}.png", written)


# ---------------------------------------------------------------------------------------------------------

def classify(path: str) -> str:
    ext = os.path.splitext(path)[1]
    if ext in (".log", ".txt"):
        return "log"
    if ext == ".jsonl":
        return "policy"
    if ext == ".csv":
        return "csv"
    if ext == ".json":
        return "timeline"
    raise InputError(f"{path}:0: unknown kind of input (want .log, .jsonl, .csv or a timeline's .json)")


def run(inputs: List[str], out_dir: str) -> List[str]:
    logs, tables, replays = [], [], []
    timelines: Dict[str, List[Timeline]] = {}
    for p in inputs:
        kind = classify(p)
        if kind == "log":
            logs.append(parse_bench_log(p))
        elif kind == "csv":
            tables.append(parse_csv(p))
        elif kind == "timeline":
            timelines.setdefault(timeline_run(p), []).append(parse_timeline(p))
        else:
            replays.append(parse_policy(p))
    os.makedirs(out_dir, exist_ok=True)
    written: List[str] = []
    if logs:
        plot_collective_logs(logs, out_dir, written)
    for t in tables:
        {"times": plot_csv_times, "ratio": plot_csv_ratio, "bars": plot_csv_bars}[t.meta["kind"]](t, out_dir, written)
    for r in replays:
        plot_policy(r, out_dir, written)
    for name, files in sorted(timelines.items()):
        plot_timeline(name, sorted(files, key=lambda t: t.rank), out_dir, written)
    return written


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Plots the benchmarks' recorded output (docs/PERFORMANCE.md, Plots).")
    ap.add_argument("inputs", nargs="*", help="logs (.log), policy replays (.jsonl), CSVs (.csv), timelines "
                    "(<name>.<rank>.json); "
                    "default: every such file in bench/results")
    ap.add_argument("-o", "--out", default=os.path.join(REPO, "docs", "plots"), help="output folder")
    args = ap.parse_args(argv)
    inputs = args.inputs
    if not inputs:
        d = os.path.join(REPO, "bench", "results")
        inputs = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith((".log", ".jsonl", ".csv", ".json")))
    try:
        written = run(inputs, args.out)
    except InputError as e:
        print(f"plot_benchmarks: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"plot_benchmarks: error: {e}", file=sys.stderr)
        return 2
    for w in written:
        print(f"plot_benchmarks: wrote {os.path.relpath(w)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
