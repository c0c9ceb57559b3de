"""Hostile inputs to the policy, guard and fault APIs (issue 47), in one process: each was a crash, a hang,
a RuntimeError or UnicodeDecodeError naming nothing, or an argument silently cut or accepted.

The fault settings' NUL case needs a process group: tests/python/test_errors.py, "nul-in-settings". The
timelines that scripts/plot_benchmarks.py reads: tests/python/test_plot_benchmarks.py.
"""

import os
import re
import threading

import pytest
import torch

import ringguard
import ringguard.policy as policy

ONE_FAMILY = '{"version": 1, "families": {"a": {"variants": [{"name": "x"}]}}}'
LIMIT = "nested deeper than the limit of 32 levels"


def _rules(tmp_path, text):
    p = tmp_path / "r.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(p)


def test_deep_rules_name_the_file_and_the_limit(tmp_path, monkeypatch):
    deep = "[" * 100000 + "]" * 100000  # ended the process with SIGSEGV (item 1)
    path = _rules(tmp_path, deep)
    with pytest.raises(ValueError, match=re.escape(f"rules '{path}': at '/0/0/0") + ".*" + LIMIT):
        policy.load(rules_path=path)
    monkeypatch.setenv("RINGGUARD_POLICY_RULES", path)
    with pytest.raises(ValueError, match=re.escape(f"rules '{path}'") + ".*" + LIMIT):
        policy.load()
    monkeypatch.delenv("RINGGUARD_POLICY_RULES")
    nested = '{"version": 1, "families": {"a": {"description": ' + deep + ', "variants": [{"name": "x"}]}}}'
    with pytest.raises(ValueError, match=re.escape("at '/families/a/description/0/0/0") + ".*" + LIMIT):
        policy.load(rules_path=_rules(tmp_path, nested))
    with pytest.raises(ValueError, match=re.escape("rules python: at '/0/0") + ".*" + LIMIT):
        policy.load(rules_json=deep)
    with pytest.raises(ValueError, match=re.escape("RINGGUARD_POLICY_SET entry '/families/a/description=[[[[") +
                       ".*" + LIMIT):
        policy.load(rules_json=ONE_FAMILY, edits="/families/a/description=" + deep)


def test_echoed_values_are_excerpts(tmp_path):
    wide = "[" + ",".join(["1"] * 30000) + "]"  # item 2: the error held the whole value
    text = '{"version": 1, "families": {"a": {"description": ' + wide + ', "variants": [{"name": "x"}]}}}'
    with pytest.raises(ValueError) as err:
        policy.load(rules_json=text)
    assert len(str(err.value)) < 200, str(err.value)
    assert str(err.value).startswith("rules python: key '/families/a/description': value [1,1,1,")
    assert "...(60001 bytes)..." in str(err.value)


def test_number_overflow_is_a_value_error_naming_file_and_key(tmp_path):
    text = ('{"version": 1, "families": {"a": {"variants": [{"name": "x"}, {"name": "y", "when": '
            '[{"signal": "s", "above": {"enter": 1e400}}]}]}}}')
    key = "key '/families/a/variants/1/when/0/above/enter': the number 1e400 is outside the range of a double"
    path = _rules(tmp_path, text)
    with pytest.raises(ValueError, match=re.escape(f"rules '{path}': {key}")):
        policy.load(rules_path=path)
    with pytest.raises(ValueError, match=re.escape(f"rules python: {key}")):
        policy.load(rules_json=text)
    with pytest.raises(ValueError, match=re.escape("RINGGUARD_POLICY_SET entry '/families/a/min_dwell_ms=1e400': "
                                                   "value: key '': the number 1e400 is outside")):
        policy.load(rules_json=ONE_FAMILY, edits="/families/a/min_dwell_ms=1e400")


def test_a_directory_is_named_as_one(tmp_path):
    with pytest.raises(ValueError, match=re.escape(f"rules file '{tmp_path}' is a directory: expected a regular "
                                                   "file")):
        policy.load(rules_path=str(tmp_path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # blocked for good before (item 4); tests/unit/test_policy_rules.cc checks it in C++ too
    with pytest.raises(ValueError, match="is a FIFO: expected a regular file"):
        policy.load(rules_path=str(fifo))


def test_bytes_that_are_not_utf8_name_file_and_offset(tmp_path):
    text = b'{"version": 1, "families": {"a": {"description": "caf\xe9", "variants": [{"name": "x"}]}}}'
    path = _rules(tmp_path, text)
    with pytest.raises(ValueError, match=re.escape(f"rules '{path}': byte {text.index(0xe9)} is not UTF-8")):
        policy.load(rules_path=path)  # a bare UnicodeDecodeError before (item 5)


def test_duplicate_keys_and_text_after_a_nul_are_refused(tmp_path):
    dup = '{"version": 1, "families": {"a": {"variants": [{"name": "x"}]}, "a": {"variants": []}}}'
    with pytest.raises(ValueError, match=re.escape("rules python: key '/families/a' appears twice in its object")):
        policy.load(rules_json=dup)
    path = _rules(tmp_path, ONE_FAMILY.encode() + b"\x00garbage")
    with pytest.raises(ValueError, match=re.escape(f"rules '{path}': byte {len(ONE_FAMILY)} is a NUL")):
        policy.load(rules_path=path)


def test_unknown_families_variants_and_signals_load_and_stay_unselected():
    # Decided (docs/DOWNGRADE.md): user code registers its families' variants and feeds its signals after
    # load(), so the rules may name them first; until then the family has no current variant.
    e = policy.load(rules_json='{"version": 1, "families": {"mine": {"variants": [{"name": "base"}, '
                    '{"name": "lean", "priority": 1, "when": [{"signal": "my.signal", "above": {"enter": 1}}]}]}}}')
    policy.step()
    assert policy.current("mine") == ""
    policy.register_variant("mine", "base")
    policy.register_variant("mine", "lean")
    policy.step({"my.signal": 2.0})
    assert policy.current("mine") == "lean"
    assert e.families()["mine"]["variants"] == ["base", "lean"]


@pytest.mark.parametrize("call,message", [
    (lambda: ringguard.guard(snapshot_budget_bytes=-1),
     "ringguard.guard: snapshot_budget_bytes must be an integer in [0, 18446744073709551615], got -1"),
    (lambda: ringguard.guard(snapshot_budget_bytes=1 << 64),
     "ringguard.guard: snapshot_budget_bytes must be an integer in [0, 18446744073709551615], got 18446744073709551616"),
    (lambda: ringguard.guard(replays=-1), "ringguard.guard: replays must be an integer in [0, 1000], got -1"),
    (lambda: ringguard.guard(device=-2), "ringguard.guard: device must be an integer in [-1, 2147483647], got -2"),
    (lambda: ringguard.guard().inject(element=-1),
     "Guard.inject: element must be an integer in [0, 18446744073709551615], got -1"),
    (lambda: ringguard.guard().inject(call=-2), "Guard.inject: call must be an integer in [-1, 9223372036854775807]"),
    (lambda: ringguard.guard().inject(attempts=0), "Guard.inject: attempts must be an integer in [1, 2147483647]"),
    (lambda: ringguard.guard().inject(output=1 << 40), "Guard.inject: output must be an integer in [-1, 2147483647]"),
    (lambda: ringguard.guard().seed(-1), "Guard.seed: seed must be an integer in [0, 18446744073709551615]"),
    (lambda: ringguard.graph_guard(lambda: None, max_replays=32),
     "graph_guard: max_replays must be an integer in [0, 31], got 32"),
    (lambda: policy.load(nvml_device=-2), "ringguard.policy.load: nvml_device must be an integer in [-1, 2147483647]"),
    (lambda: ringguard.init_from_mpi(master_port=70000),
     "ringguard.init_from_mpi: master_port must be an integer in [1, 65535], got 70000"),
])
def test_integer_parameters_name_themselves_and_their_range(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()  # "Unable to cast Python instance of type <class 'int'> to C++ type '?'" before (item 6)


def test_integer_parameters_refuse_other_types():
    with pytest.raises(TypeError, match=re.escape("ringguard.guard: replays must be an integer in [0, 1000], got "
                                                  "float 2.0")):
        ringguard.guard(replays=2.0)
    with pytest.raises(TypeError, match="snapshot_budget_bytes must be an integer"):
        ringguard.guard(snapshot_budget_bytes=True)


def test_the_extension_checks_its_integers_too():
    from ringguard import _ext

    with pytest.raises(ValueError, match=re.escape("ringguard: guard: snapshot_budget_bytes must be an integer in "
                                                   "[0, 18446744073709551615], got -1")):
        _ext.load().Guard(dict(snapshot_budget_bytes=-1), -1)


def test_concurrent_steps_on_one_guard_are_refused_in_the_python_apis_words():
    """Item 7: two threads' steps on one guard got "runStep does not nest". A guard runs one step at a time
    (docs/GUARD.md, "Threads"): the second thread's step is refused while the first runs, and a step inside a
    step on one thread is refused as nesting."""
    g = ringguard.guard(mode="deferred")
    w = torch.ones(4)
    inside, tried = threading.Event(), threading.Event()
    errors = []

    def add(w):
        w.add_(1.0)

    guarded = g(add, mutates=["w"])

    def first():
        def region():
            guarded(w)
            inside.set()
            tried.wait(30)
        g.step(region)

    def second():
        inside.wait(30)
        try:
            g.step(lambda: guarded(w))
        except RuntimeError as e:
            errors.append(str(e))
        finally:
            tried.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == ["ringguard.guard: Guard.step while another thread runs a step of the same guard: a guard "
                      "runs one step at a time (each step gathers, restores and replays every guarded call made "
                      "until it ends); give each thread its own ringguard.guard(...), or run the steps one after "
                      "another"]
    assert w.tolist() == [2.0] * 4  # the first step ran once, the refused one not at all
    with pytest.raises(ValueError, match=re.escape("ringguard.guard: Guard.step inside a step of the same guard: "
                                                   "steps do not nest")):
        g.step(lambda: g.step(lambda: guarded(w)))
    assert w.tolist() == [2.0] * 4
    # Steps one after another, from any thread, are fine.
    t = threading.Thread(target=lambda: g.step(lambda: guarded(w)))
    t.start()
    t.join(60)
    g.step(lambda: guarded(w))
    assert w.tolist() == [4.0] * 4


@pytest.mark.parametrize("call,what", [
    (lambda: ringguard.guard().inject(op="mlp\x00x"), "Guard.inject: op"),
    (lambda: ringguard.guard().inject(value="nan\x00x"), "Guard.inject: value"),
    (lambda: ringguard.guard(policy="replay\x00x"), "guard: policy"),
    (lambda: ringguard.guard().call(lambda x: x + 1, torch.ones(2), name="op\x00x"), "guard: the op's name"),
    (lambda: policy.load(rules_path="/tmp/r.json\x00x"), "policy.load: rules_path"),
    (lambda: policy.load(rules_json=ONE_FAMILY, edits="/version=1\x00x"), "policy.load: edits"),
    (lambda: policy.feed_signals({"a\x00b": 1.0}), "policy: a signal's name"),
    (lambda: ringguard.issue_lane("lane\x00x"), "issue_lane: name"),
    (lambda: ringguard.write_files("/tmp/t\x00x"), "write_files: timeline_prefix"),
])
def test_strings_with_nuls_are_refused_where_they_cross_into_cpp(call, what):
    with pytest.raises(ValueError, match=re.escape(f"ringguard: {what} holds a NUL byte at offset")):
        call()  # cut at the NUL and accepted before (item 8)


def test_fault_keywords_that_name_one_setting_twice_are_refused():
    from ringguard.options import fault_dict

    with pytest.raises(ValueError, match=re.escape("set_fault: 'prob' and 'fault_prob' both set "
                                                   "RINGGUARD_FAULT_PROB: give one of them")):
        fault_dict({"prob": 0.1, "fault_prob": 0.2})
    # None is the setting's default, as leaving it out (set_fault replaces the whole fault configuration).
    assert fault_dict({"prob": None, "mode": "bitflip"}) == {"RINGGUARD_FAULT_MODE": "bitflip"}


def test_returned_tensors_within_the_state_are_covered_by_it_and_others_are_scanned():
    """Decided (docs/GUARD.md, "Aliased arguments"): a returned tensor is a result, not a declaration. One
    within a declared state (an in-place op returns its state; a view of part of it) is covered by the state;
    any other is scanned as an output. A returned tensor that reached beyond the state was dropped unscanned."""
    g = ringguard.guard(policy="raise")
    t = torch.ones(4)

    def within(st):
        st.mul_(float("nan"))
        return st[1:3]

    with pytest.raises(ringguard.GuardError, match="state 'st' has 3 non-finite values"):
        g(within, mutates=["st"])(t[:3])
    assert t.tolist() == [1.0] * 4

    def beyond(st):
        t[3] = float("nan")  # outside the state, inside what the op returns
        return t[1:]

    with pytest.raises(ringguard.GuardError, match=re.escape("output 'out' has 1 non-finite value")):
        g(beyond, mutates=["st"])(t[:3])
