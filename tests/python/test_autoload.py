"""The torch.backends entry point, ``import ringguard`` and ``ringguard-run`` (fresh interpreters)."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import harness

PROBE = textwrap.dedent("""
    import json, sys
    {pre}
    import torch.distributed as dist
    maps = open("/proc/self/maps").read()
    print("RESULT " + json.dumps({{
        "registered": "ringguard" in dist.Backend.backend_list,
        "count": dist.Backend.backend_list.count("ringguard"),
        "plugin": "RINGGUARD" in dist.Backend._plugins,
        "capability": dist.Backend.backend_capability.get("ringguard"),
        "package": "ringguard" in sys.modules,
        "extension": "ringguard._C" in sys.modules,
        "libmpi": "libmpi" in maps,
        "extension_mapped": "ringguard/_C" in maps,
    }}))
""")


def probe(pre="import torch", env=None):
    full_env = dict(os.environ)
    for var in ("RINGGUARD_AUTOLOAD", "TORCH_DEVICE_BACKEND_AUTOLOAD"):
        full_env.pop(var, None)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", PROBE.format(pre=pre)], env=full_env, capture_output=True,
                          text=True, timeout=120, cwd="/")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout + proc.stderr
    return json.loads(lines[-1][len("RESULT "):]), proc.stderr


def test_entry_point_is_installed():
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="torch.backends") if ep.name == "ringguard"]
    assert [ep.value for ep in eps] == ["ringguard._autoload:entry"], eps


def test_import_torch_registers_lazily():
    r, err = probe("import torch")
    assert r["registered"] and r["plugin"] and r["count"] == 1, r
    assert r["capability"] == ["cpu", "cuda"], r
    assert not r["extension"] and not r["extension_mapped"], "import torch loaded ringguard._C"
    assert not r["libmpi"], "import torch loaded libmpi"
    assert "could not register" not in err, err


@pytest.mark.parametrize("env", [{"RINGGUARD_AUTOLOAD": "0"}, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}],
                         ids=["RINGGUARD_AUTOLOAD=0", "TORCH_DEVICE_BACKEND_AUTOLOAD=0"])
def test_autoload_can_be_disabled(env):
    r, _ = probe("import torch", env)
    assert not r["registered"] and not r["plugin"], r
    assert not r["extension"], r
    # TORCH_DEVICE_BACKEND_AUTOLOAD=0: torch never imports it; RINGGUARD_AUTOLOAD=0: the entry point's
    # import of the package is forgotten (so that the script's `import ringguard` does the work).
    assert not r["package"], "ringguard stays imported although its autoload is off"


@pytest.mark.parametrize("pre", [
    "import ringguard; import ringguard; import torch",
    "import torch; import ringguard",
    "import ringguard, importlib; importlib.reload(ringguard); import torch",
], ids=["ringguard-first-twice", "torch-first", "reload"])
def test_import_ringguard(pre):
    r, _ = probe(pre)
    assert r["registered"] and r["count"] == 1, r
    if pre.startswith("import ringguard"):
        assert r["extension"], "import ringguard did not load (and so did not check) the extension"


@pytest.mark.parametrize("pre", ["import ringguard", "import torch; import ringguard",
                                 "import torch; import ringguard.policy; import ringguard"],
                         ids=["ringguard-first", "torch-first", "torch-then-a-submodule"])
def test_import_ringguard_registers_without_autoload(pre):
    # torch-first with RINGGUARD_AUTOLOAD=0 (the usual order: examples import torch first) registered
    # nothing: torch's entry point had imported the package, whose __init__ skips its work during torch's
    # initialisation, so the script's `import ringguard` found it done ("Unknown backend type ringguard").
    for env in ({"RINGGUARD_AUTOLOAD": "0"}, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}):
        r, _ = probe(pre, env)
        assert r["registered"] and r["count"] == 1 and r["extension"], (env, r)


def test_extension_matches_torch():
    import torch

    import ringguard
    from ringguard import _C

    from ringguard._ext import matches

    assert matches(_C.__torch_version__, str(torch.__version__)), (_C.__torch_version__, torch.__version__)
    names = set(_C.option_names())
    missing = set(ringguard.options.field_names().values()) - names
    assert not missing, f"Options fields the extension does not know: {missing}"


# A script that never imports ringguard: the backend comes from the entry point, the extension from
# the first init_process_group.
NO_IMPORT_SCRIPT = textwrap.dedent("""
    import os, sys
    import torch, torch.distributed as dist
    assert "ringguard._C" not in sys.modules
    dist.init_process_group("ringguard")
    assert "ringguard._C" in sys.modules
    # Larger than a shared-memory window (RINGGUARD_SHM_WINDOW_BYTES): the ring, in RINGGUARD_SLICE_BYTES
    # slices, so a fault probability has many transfers to hit.
    t = torch.full((70001,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    n = dist.get_world_size()
    assert torch.equal(t, torch.full((70001,), float(n * (n + 1) // 2))), t[:4]
    b = dist.group.WORLD._get_backend(torch.device("cpu"))
    c = b.counters()
    sys.stdout.write(f"RESULT rank={dist.get_rank()} slices_verified={c['slices_verified']} "
                     f"injected={c['injected']} detected={c['detected']} escaped={c['escaped']}\\n")
    sys.stdout.flush()
    if os.environ.get("EXPECT_FAULTS") == "1":
        assert os.environ.get("RINGGUARD_FAULT_PROB") == "0.5", os.environ.get("RINGGUARD_FAULT_PROB")
        assert c["injected"] > 0 and c["detected"] == c["injected"] and c["escaped"] == 0, c
    dist.destroy_process_group()
""")


def _results(output):
    # The ranks share one stdout: their lines can interleave, so count the markers, not lines.
    return re.findall(r"RESULT rank=(\d+)", output)


def test_torchrun_without_import(tmp_path):
    script = tmp_path / "no_import.py"
    script.write_text(NO_IMPORT_SCRIPT)
    cmd = harness.torchrun_cmd(str(script), 2)
    rc, timed_out, secs, log = harness.run_command(cmd, {"RINGGUARD_AUTOLOAD": "1"}, timeout=180)
    assert not timed_out and rc == 0, f"rc={rc} timed_out={timed_out}\n{log[-5000:]}"
    assert sorted(_results(log)) == ["0", "1"], log[-5000:]


def test_ringguard_run_with_fault_options(tmp_path):
    exe = shutil.which("ringguard-run") or os.path.join(os.path.dirname(sys.executable), "ringguard-run")
    assert os.path.exists(exe), "the ringguard-run console script is not installed"
    script = tmp_path / "no_import.py"
    script.write_text(NO_IMPORT_SCRIPT)
    cmd = [exe, "--rg", "FAULT_PROB=0.5", "--rg=RINGGUARD_SLICE_BYTES=1024", "--nproc-per-node=2", str(script)]
    rc, timed_out, secs, log = harness.run_command(cmd, {"RINGGUARD_AUTOLOAD": "0", "EXPECT_FAULTS": "1"},
                                                   timeout=180)
    assert not timed_out and rc == 0, f"rc={rc} timed_out={timed_out}\n{log[-5000:]}"
    assert sorted(_results(log)) == ["0", "1"], log[-5000:]
