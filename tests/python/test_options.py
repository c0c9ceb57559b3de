"""The pure-Python parts: Options, option precedence, set_fault keywords, ringguard-run, init_from_mpi."""

import os
import subprocess
import sys
from datetime import timedelta

import pytest

import harness

from ringguard import init_from_mpi
from ringguard._settings import SETTINGS
from ringguard.options import MAX_TIMEOUT_MS, Options, fault_dict, field_names, resolve, timeout_ms
from ringguard.run import split_args, torchrun_args


def test_to_dict_only_set_fields():
    assert Options().to_dict() == {}
    d = Options(slice_bytes=65536, timeout=timedelta(seconds=2.5), fault_prob=0.05, fault_mode="bitflip",
                fault_schedule=[(3, 1, 0, 2), (4, 0, 1, 1)], extra={"RINGGUARD_X": 7}).to_dict()
    assert d == {"RINGGUARD_SLICE_BYTES": "65536", "RINGGUARD_TIMEOUT_MS": "2500",
                 "RINGGUARD_FAULT_PROB": "0.05", "RINGGUARD_FAULT_MODE": "bitflip",
                 "RINGGUARD_FAULT_SCHEDULE": "3:1:0:2,4:0:1:1", "RINGGUARD_X": "7"}


def test_every_field_has_a_name():
    fields = [f for f in Options.__dataclass_fields__ if f != "extra"]
    assert len(fields) == 26
    values = {f: 1 for f in fields}
    values.update(timeout=timedelta(milliseconds=1), fault_schedule="1:1:1:1")
    d = Options(**values).to_dict()
    assert len(d) == 26 and all(k.startswith("RINGGUARD_") for k in d)


def test_fields_come_from_the_declarations():
    # One Options field per per-group declaration (src/core/settings.cc), in declaration order; the
    # process-wide settings (kernels, logging, tracing, telemetry, policy) have none.
    fields = [f for f in Options.__dataclass_fields__ if f != "extra"]
    assert fields == [s.field for s in SETTINGS if s.field is not None]
    assert field_names() == {s.field: s.name for s in SETTINGS if s.field is not None}
    process_wide = {s.name for s in SETTINGS if s.field is None}
    assert {"RINGGUARD_KERNEL_SMS", "RINGGUARD_LOG_SUBSYS", "RINGGUARD_TIMELINE", "RINGGUARD_SUMMARY",
            "RINGGUARD_TIMELINE_EVENTS", "RINGGUARD_TELEMETRY_INTERVAL_MS"} <= process_wide
    assert MAX_TIMEOUT_MS == 365 * 24 * 3600 * 1000
    for s in SETTINGS:
        assert s.name.startswith("RINGGUARD_") and s.doc, s
        if s.kind in ("choice", "list"):
            assert s.choices and all(c in s.doc for c in s.choices), s
        if s.kind == "choice":
            assert s.default in s.choices, s
        if s.kind == "unsigned":
            assert s.lo <= int(s.default) <= s.hi or int(s.default) == 0, s


def test_settings_match_the_extension():
    # The generated module and the compiled extension know the same variables, in the same order.
    from ringguard import _C

    assert list(_C.option_names()) == [s.name for s in SETTINGS]


@pytest.mark.parametrize("bad, exc", [
    (dict(timeout=5), TypeError),
    (dict(timeout=timedelta(0)), ValueError),
    (dict(slots=True), TypeError),
    (dict(extra={"SLICE_BYTES": "1"}), ValueError),
    (dict(slice_bytes=1, extra={"RINGGUARD_SLICE_BYTES": "2"}), ValueError),
])
def test_to_dict_rejects(bad, exc):
    with pytest.raises(exc):
        Options(**bad).to_dict()


def test_timeout_ms_rounds_up():
    assert timeout_ms(timedelta(microseconds=1)) == 1
    assert timeout_ms(timedelta(minutes=30)) == 1_800_000


def test_version_match():
    from ringguard._ext import matches

    assert matches("2.11.0+cu130", "2.11.0+cu130") and matches("2.11.0", "2.11.0+cu130")
    assert not matches("2.11.0+cpu", "2.11.0+cu130") and not matches("2.10.0", "2.11.0+cu130")
    assert not matches("2.11.0", "2.11.01")


def test_resolve_precedence():
    pg = timedelta(seconds=7)
    # No option, no env: the process-group timeout becomes RINGGUARD_TIMEOUT_MS.
    assert resolve(None, pg, {}) == ({"RINGGUARD_TIMEOUT_MS": "7000"}, 7000)
    # The env's value wins over the process-group timeout (the C++ side reads it).
    assert resolve(None, pg, {"RINGGUARD_TIMEOUT_MS": "900"}) == ({}, 900)
    # Options win over both.
    opts = Options(timeout=timedelta(seconds=3), slots=4)
    assert resolve(opts, pg, {"RINGGUARD_TIMEOUT_MS": "900"}) == \
        ({"RINGGUARD_TIMEOUT_MS": "3000", "RINGGUARD_SLOTS": "4"}, 3000)
    # A bad env value is left for the extension to reject by name.
    assert resolve(None, pg, {"RINGGUARD_TIMEOUT_MS": "soon"}) == ({}, None)


@pytest.mark.parametrize("bad", [{"RINGGUARD_SLOTS": "4"}, "slots=4", object()])
def test_resolve_rejects_other_types(bad):
    with pytest.raises(TypeError, match="ringguard.Options"):
        resolve(bad, timedelta(seconds=1), {})


def test_fault_dict():
    assert fault_dict({"mode": "burst", "prob": 0.25, "fault_seed": 3, "RINGGUARD_FAULT_BITS": 5,
                       "repeat": None, "schedule": [(1, 2, 3, 0)]}) == {
        "RINGGUARD_FAULT_MODE": "burst", "RINGGUARD_FAULT_PROB": "0.25", "RINGGUARD_FAULT_SEED": "3",
        "RINGGUARD_FAULT_BITS": "5", "RINGGUARD_FAULT_SCHEDULE": "1:2:3:0"}


def test_run_split_args():
    env, rest = split_args(["--rg", "fault_prob=0.1", "--rg=RINGGUARD_SLICE_BYTES=4096", "--nproc-per-node=2",
                            "train.py", "--rg", "x=y"])
    assert env == {"RINGGUARD_FAULT_PROB": "0.1", "RINGGUARD_SLICE_BYTES": "4096"}
    assert rest == ["--nproc-per-node=2", "train.py", "--rg", "x=y"]
    with pytest.raises(SystemExit):
        split_args(["--rg", "novalue"])


@pytest.mark.parametrize("argv,got", [
    (["--rg", "--nproc-per-node=2", "t.py"], "'--nproc-per-node=2'"),  # swallowed torchrun's option: 1 rank
    (["--rg"], "nothing"),
    (["--rg=", "t.py"], "''"),
    (["--rg", "FAULT_PROB", "t.py"], "'FAULT_PROB'"),
    (["--rg", "=1", "t.py"], "'=1'"),
    (["--rg", "FAULT-PROB=1", "t.py"], "'FAULT-PROB=1'"),
    (["--rg", "-FAULT_PROB=1", "t.py"], "'-FAULT_PROB=1'"),
])
def test_run_rg_needs_a_setting(argv, got, capsys):
    # `--rg --nproc-per-node=2 t.py` exported RINGGUARD_--NPROC-PER-NODE=2 and ran one rank.
    with pytest.raises(SystemExit) as exc:
        split_args(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "ringguard-run: --rg needs NAME=VALUE (a ringguard setting, e.g. --rg NAN_CHECK=error), got " + got)


@pytest.mark.parametrize("setting,hint", [("FAULT_PROBABILITY=0.1", "FAULT_PROB"),
                                          ("ringguard_slice_byte=4096", "SLICE_BYTES")])
def test_run_rg_unknown_setting(setting, hint, capsys):
    with pytest.raises(SystemExit) as exc:
        split_args(["--rg", setting, "t.py"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"is not a ringguard setting (did you mean {hint}? see docs/ENV.md)" in err, err


def test_run_rg_autoload_is_honoured(tmp_path):
    # `--rg AUTOLOAD=0` was overwritten with RINGGUARD_AUTOLOAD=1.
    script = tmp_path / "autoload.py"
    script.write_text("import os\nprint('AUTOLOAD=' + os.environ['RINGGUARD_AUTOLOAD'], flush=True)\n")
    for argv, expected in ((["--rg", "autoload=0"], "AUTOLOAD=0"), ([], "AUTOLOAD=1")):
        rc, timed_out, secs, log = harness.run_command([sys.executable, "-m", "ringguard.run", *argv,
                                                        str(script)], {"RINGGUARD_AUTOLOAD": "0"}, timeout=60)
        assert not timed_out and rc == 0, f"rc={rc} timed_out={timed_out}\n{log[-3000:]}"
        assert expected in log, log[-3000:]


def test_run_rg_without_setting_starts_nothing(tmp_path):
    script = tmp_path / "ran.py"
    script.write_text("print('RANK STARTED', flush=True)\n")
    rc, timed_out, secs, log = harness.run_command([sys.executable, "-m", "ringguard.run", "--rg",
                                                    "--nproc-per-node=2", str(script)], timeout=60)
    assert not timed_out and rc == 2, f"rc={rc}\n{log[-3000:]}"
    assert "RANK STARTED" not in log and "--rg needs NAME=VALUE" in log, log[-3000:]


def test_run_standalone_default():
    assert torchrun_args(["--nproc-per-node", "2", "t.py", "--master-port", "1"])[0] == "--standalone"
    assert torchrun_args(["--master-port=1234", "t.py"]) == ["--master-port=1234", "t.py"]
    assert torchrun_args(["--nnodes=2", "--rdzv-endpoint=h:1", "t.py"])[0] != "--standalone"


@pytest.mark.parametrize("pet", [
    {"NNODES": "2", "RDZV_BACKEND": "c10d", "RDZV_ENDPOINT": "h:29577", "RDZV_ID": "job"},  # PyTorchJob
    {"RDZV_ENDPOINT": "h:29577"},
    {"MASTER_ADDR": "h", "MASTER_PORT": "29577"},
    {"NNODES": "2"},
    {"STANDALONE": "1"},
])
def test_run_standalone_respects_pet_environment(pet, monkeypatch):
    # PET_* settings looked like torchrun's defaults, so --standalone replaced them.
    for name, value in pet.items():
        monkeypatch.setenv("PET_" + name, value)
    assert torchrun_args(["t.py"]) == ["t.py"]
    assert torchrun_args(["--nproc-per-node=2", "t.py"]) == ["--nproc-per-node=2", "t.py"]


@pytest.mark.parametrize("pet", [{"NPROC_PER_NODE": "2"}, {"STANDALONE": "0"}, {"NODE_RANK": "0"}])
def test_run_standalone_with_pet_defaults(pet, monkeypatch):
    for name, value in pet.items():
        monkeypatch.setenv("PET_" + name, value)
    assert torchrun_args(["t.py"]) == ["--standalone", "t.py"]


TWO_NODE_SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("ringguard")
t = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"RESULT rank={dist.get_rank()} world={dist.get_world_size()} sum={t[0].item():g}", flush=True)
dist.destroy_process_group()
"""


def test_run_two_nodes_from_pet_environment(tmp_path):
    # Two launchers configured only through PET_* (as Kubeflow's PyTorchJob does) hung
    # until killed: --standalone gave each its own localhost:0 rendezvous while both waited for 2 nodes.
    from concurrent.futures import ThreadPoolExecutor

    script = tmp_path / "two_nodes.py"
    script.write_text(TWO_NODE_SCRIPT)
    env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_RDZV_BACKEND": "c10d",
           "PET_RDZV_ENDPOINT": f"127.0.0.1:{harness.free_port()}", "PET_RDZV_ID": f"pet{os.getpid()}"}
    cmd = [sys.executable, "-m", "ringguard.run", str(script)]
    with ThreadPoolExecutor(2) as pool:
        nodes = list(pool.map(lambda _: harness.run_command(cmd, env, timeout=60), range(2)))
    for rc, timed_out, secs, log in nodes:
        assert not timed_out and rc == 0, f"rc={rc} timed_out={timed_out} after {secs:.0f} s\n{log[-3000:]}"
    results = sorted(line for _, _, _, log in nodes for line in log.splitlines() if line.startswith("RESULT"))
    assert results == ["RESULT rank=0 world=2 sum=3", "RESULT rank=1 world=2 sum=3"], results


def test_init_from_mpi(monkeypatch):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "MPI_"))}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    monkeypatch.setattr(os, "environ", env)  # a private copy: nothing leaks into other tests
    with pytest.raises(RuntimeError, match="mpirun"):
        init_from_mpi()
    env.update(OMPI_COMM_WORLD_RANK="2", OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_LOCAL_RANK="0",
               MASTER_PORT="31000")
    assert init_from_mpi() == (2, 4)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("2", "4", "0", "4")
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "31000"


@pytest.mark.parametrize("key,hint", [("probability", "prob"), ("sead", "seed"), ("fault_seeds", "seed"),
                                      ("RINGGUARD_FAULT_PROBABILITY", "prob")])
def test_fault_dict_rejects_unknown_keys(key, hint):
    # Accepted and ignored, these injected nothing (issue 17, defect 4).
    with pytest.raises(ValueError, match=f"unknown setting '{key}' \\(did you mean '{hint}'\\?\\)"):
        fault_dict({key: 0.5})


@pytest.mark.parametrize("where", ["environ", "options"])
def test_timeout_above_a_year_names_the_setting(where):
    # 1e14 ms overflowed the nanosecond clocks (and timedelta(milliseconds=...) raised a bare OverflowError).
    big = "99999999999999"
    environ = {"RINGGUARD_TIMEOUT_MS": big} if where == "environ" else {}
    opts = Options(extra={"RINGGUARD_TIMEOUT_MS": big}) if where == "options" else None
    with pytest.raises(ValueError, match="RINGGUARD_TIMEOUT_MS='99999999999999'"):
        resolve(opts, timedelta(seconds=1), environ)
    with pytest.raises(ValueError, match="RINGGUARD_TIMEOUT_MS"):
        timeout_ms(timedelta(days=366))
    assert resolve(None, timedelta(seconds=1), {"RINGGUARD_TIMEOUT_MS": str(365 * 24 * 3600 * 1000)})[1] == \
        365 * 24 * 3600 * 1000


def test_misspelt_variable_is_named_under_torch(tmp_path):
    """The backend reads its settings through pg_options as well as the environment; a misspelt
    RINGGUARD_* variable still gets the warning that names the closest setting (once per process)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = ("import torch, torch.distributed as dist, ringguard\n"
            f"dist.init_process_group('ringguard', rank=0, world_size=1, init_method='tcp://127.0.0.1:{port}')\n"
            "dist.all_reduce(torch.ones(4))\n"
            "dist.destroy_process_group()\n")
    env = dict(os.environ, RINGGUARD_SLICE_BYTE="4096")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("RINGGUARD_SLICE_BYTE is not a ringguard setting") == 1, proc.stderr[-2000:]
    assert "did you mean RINGGUARD_SLICE_BYTES?" in proc.stderr


def test_backend_of_a_group_without_ringguard_names_what_it_has():
    """ringguard.counters(group) and friends on a group with no ringguard backend, or on something that is
    not a group, raise TypeError saying so (a string gave AttributeError "'str' object has no attribute
    '_get_backend'"); "cpu:gloo,cuda:ringguard" finds ringguard's CUDA backend."""
    code = (
        "import torch, torch.distributed as dist, ringguard\n"
        "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
        "for arg in (None, 'x'):\n"
        "    try:\n"
        "        ringguard.counters(arg)\n"
        "    except TypeError as e:\n"
        "        print('ERR', e)\n"
        "dist.destroy_process_group()\n"
        "dist.init_process_group('cpu:gloo,cuda:ringguard', store=dist.HashStore(), rank=0, world_size=1)\n"
        "print('MIXED', ringguard.counters()['collectives'])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert ("ERR ringguard: this process group has no ringguard backend (cpu: ProcessGroupGloo, cuda: "
            "ProcessGroupGloo)") in r.stdout, r.stdout
    assert "ERR ringguard: expected a torch.distributed ProcessGroup (None: the default group), got str" in r.stdout
    assert "MIXED 0" in r.stdout, r.stdout


def test_run_help_names_rg_before_torchruns_options():
    """`ringguard-run --help` printed torchrun's help only: nothing said what --rg is."""
    r = subprocess.run([sys.executable, "-m", "ringguard.run", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.index("--rg NAME=VALUE") < r.stdout.index("torchrun's options:") < \
        r.stdout.index("--nproc-per-node NPROC_PER_NODE"), r.stdout[:3000]
