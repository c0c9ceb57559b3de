#!/usr/bin/env python3
"""Replays a signal trace (JSON lines, the format of tests/unit/data/policy/*.jsonl and of the telemetry's
trace writer) through the downgrade engine (``ringguard._C.PolicyEngine`` via ``ringguard.policy``) and writes
what it saw and decided, one JSON object per line, for scripts/plot_benchmarks.py:

    python3 bench/policy_replay.py --rules tests/unit/data/policy/rules_small.json \\
        tests/unit/data/policy/fragmentation.jsonl > bench/results/policy_fragmentation.jsonl

Lines: '#' comments (command, machine, date), then {"kind": "meta"} (the rules as loaded from the file,
the trace), one {"kind": "step"} per trace record (the signals fed, each family's variant after the step),
one {"kind": "decision"} per switch (the engine's own record), {"kind": "counters"}, and, when a
``<trace>.expected`` file sits beside the trace, {"kind": "check"}: whether the decisions equal it (the
same comparison as tests/unit/test_policy_engine.cc). Every variant the rules list is registered as
enabled. Needs the installed Python package (``pip install --no-build-isolation .``): torch and
ringguard._C. Exits 1 when the decisions differ from the expected file.
"""

import argparse
import datetime
import json
import os
import platform
import sys


def read_trace(path):
    records = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"policy_replay: {path}:{n}: not JSON: {e}")
            if "signals" not in rec or "t_ms" not in rec:
                sys.exit(f"policy_replay: {path}:{n}: a trace record needs 't_ms' and 'signals'")
            records.append(rec)
    return records


def decision_line(d):
    return f"{d['step']} {d['family']}: {d['from'] or '(none)'} -> {d['to']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="JSON-lines signal trace")
    ap.add_argument("--rules", required=True, help="rules file (JSON, docs/DOWNGRADE.md)")
    ap.add_argument("-o", "--out", help="output file (default: stdout)")
    args = ap.parse_args()

    import ringguard
    import ringguard.policy as policy

    with open(args.rules) as f:
        rules = json.load(f)
    records = read_trace(args.trace)
    policy.load(rules_path=args.rules, edits="", builtin_variants=False)
    families = policy.engine().families()
    for family, info in families.items():
        for name in info["variants"]:
            policy.register_variant(family, name)

    out = open(args.out, "w") if args.out else sys.stdout
    emit = lambda obj: out.write(json.dumps(obj, sort_keys=True) + "\n")  # noqa: E731
    out.write(f"# command: python3 bench/policy_replay.py --rules {args.rules} {args.trace}\n")
    out.write(f"# machine: {platform.node()} ({platform.platform()}), python {platform.python_version()}, "
              f"ringguard from {os.path.dirname(ringguard.__file__)}\n")
    out.write(f"# date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}\n")
    emit({"kind": "meta", "rules_file": args.rules, "trace": args.trace, "rules": rules,
          "families": families})
    for i, rec in enumerate(records):
        policy.step(rec["signals"], t_ms=rec["t_ms"])
        emit({"kind": "step", "step": i, "t_ms": rec["t_ms"], "signals": rec["signals"],
              "current": {family: policy.current(family) for family in families}})
    decisions = policy.decisions()
    for d in decisions:
        emit(dict(d, kind="decision"))
    emit(dict(policy.counters(), kind="counters"))

    status = 0
    expected_path = os.path.splitext(args.trace)[0] + ".expected"
    if os.path.exists(expected_path):
        with open(expected_path) as f:
            expected = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")]
        got = [decision_line(d) for d in decisions]
        emit({"kind": "check", "expected": expected_path, "match": got == expected})
        if got != expected:
            print(f"policy_replay: decisions differ from {expected_path}:\n  got      {got}\n"
                  f"  expected {expected}", file=sys.stderr)
            status = 1
    if args.out:
        out.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
