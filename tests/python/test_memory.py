"""ringguard's own pools beside torch's allocator (docs/DOWNGRADE.md, "ringguard's pools beside PyTorch's").

CPU (every machine): without CUDA memory no pool exists, every figure reads zero and nothing is fed to the
downgrade engine as pool.* (missing, never a made-up 0); empty_cache() is a no-op that does not fail;
torch.cuda.empty_cache is wrapped once the extension is loaded; a CPU device is refused by name.
CUDA (two ranks sharing a GPU, host-staged: a world of one moves nothing, so its pools stay empty): a CUDA
all_reduce makes the device communicator's pools; memory_reserved() counts
them beside torch.cuda.memory_reserved(); torch.cuda.empty_cache() trims them (memory in use stays); the
engine's pool.device.reserved_bytes is the same figure.
"""

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import harness

CASES = harness.Cases()


@CASES.case("hook-installed")
def _(ctx):
    import ringguard

    ringguard.memory_stats  # noqa: B018  (the package's names)
    assert getattr(torch.cuda.empty_cache, "__ringguard__", False), torch.cuda.empty_cache
    import torch.cuda.memory as torch_memory

    assert torch_memory.empty_cache is torch.cuda.empty_cache
    torch.cuda.empty_cache()  # safe with or without CUDA
    ringguard.empty_cache()
    return {"wrapped": True}


@CASES.case("cpu-no-pools")
def _(ctx):
    import ringguard
    import ringguard.policy as policy

    if torch.cuda.is_available():
        raise harness.Skip("this machine has CUDA: pools may exist")
    s = ringguard.memory_stats()
    for kind in ("device", "pinned"):
        assert s[kind]["pools"] == 0 and s[kind]["reserved_bytes"] == 0, s
    assert ringguard.memory_reserved() == 0
    with pytest.raises(ValueError, match="cpu is not a CUDA device"):
        ringguard.memory_reserved("cpu")
    policy.load()
    policy.feed_torch_stats()  # no CUDA: nothing read, nothing fed
    sig = policy.signals()
    assert sig["pool.device.reserved_bytes"] is None and sig["pool.pinned.reserved_bytes"] is None, sig
    return {"pools": 0}


@CASES.case("cuda-pools-beside-torch")
def _(ctx):
    import ringguard
    import ringguard.policy as policy

    if ctx.device != "cuda":
        raise harness.Skip("needs a GPU (RINGGUARD_TEST_DEVICE=cuda)")
    x = torch.ones(16 << 20, device="cuda")  # 64 MiB
    dist.all_reduce(x)
    torch.cuda.synchronize()
    assert torch.equal(x, torch.full_like(x, float(ctx.size)))
    before = ringguard.memory_stats()
    assert before["device"]["pools"] >= 1 and before["pinned"]["pools"] >= 1, before
    assert before["device"]["reserved_bytes"] > 0 and before["device"]["reserved_bytes"] >= before["device"]["used_bytes"]
    assert ringguard.memory_reserved() == before["device"]["reserved_bytes"]
    policy.load()
    policy.feed_torch_stats()
    sig = policy.signals()
    assert sig["pool.device.reserved_bytes"] == float(before["device"]["reserved_bytes"]), (sig, before)
    torch.cuda.empty_cache()  # the wrapped one: trims ringguard's pools too
    after = ringguard.memory_stats()
    assert after["device"]["used_bytes"] == before["device"]["used_bytes"], (before, after)  # in use: kept
    assert after["device"]["reserved_bytes"] <= before["device"]["reserved_bytes"], (before, after)
    assert after["pinned"]["reserved_bytes"] == after["pinned"]["used_bytes"], after  # nothing cached
    dist.all_reduce(x)  # the communicator still works after a trim
    torch.cuda.synchronize()
    assert torch.equal(x, torch.full_like(x, float(ctx.size) ** 2))
    return {"before": before, "after": after, "torch_reserved": torch.cuda.memory_reserved()}


def _init():
    dist.init_process_group("ringguard", timeout=timedelta(seconds=60))


# --- pytest side ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run():
    return harness.launch(__file__, 1)


@pytest.mark.parametrize("name", [n for n in CASES.names if not n.startswith("cuda-")])
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


@pytest.fixture(scope="module")
def cuda_run():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    return harness.launch(__file__, 2, env={"RINGGUARD_TEST_DEVICE": "cuda"})


def test_cuda_pools(cuda_run):
    harness.check_case(CASES, cuda_run, "cuda-pools-beside-torch")


if __name__ == "__main__":
    harness.run_worker(CASES, _init)


def _package_imports(path):
    """The package's modules that `path` imports (at module level or inside functions)."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names.update([node.module] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("ringguard."))
    return {n.split(".")[0] for n in names}


def test_extension_loader_imports_no_module_of_the_package():
    """_ext, which most modules import, imports none of them (issue 44: _ext <-> memory was a circle): what
    hooks in at load time registers itself (_ext.when_loaded)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2] / "python" / "ringguard"
    modules = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    assert _package_imports(root / "_ext.py") & modules == set()
