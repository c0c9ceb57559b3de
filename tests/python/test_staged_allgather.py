"""The all_gather family's ``staged_chunked`` variant in the "ringguard" backend (docs/DOWNGRADE.md).

CPU runs (CI) cover the selection and the plumbing: the variant is enabled only for an engine on a CUDA
device, the backend reads the engine's selection when it issues an all-gather (a new selection takes effect
at the next ``policy.step()``), and CPU tensors never take it, even while it is selected: their results stay
exact and the staged counter stays 0. The CUDA run (``RINGGUARD_TEST_DEVICE=cuda``: 2 ranks sharing the GPU
through the staged device transport) all-gathers the same tensors through the ring and through the staged
variant, checks both bit for bit against the closed form and each other, and that the staged path ran.

RINGGUARD_STAGED_CHUNK_BYTES is 4096 here, so the larger counts take several chunks.
"""

import pytest
import torch
import torch.distributed as dist

import harness
import staged
from staged import CHUNK_BYTES, same_bits as _same_bits

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "i64": torch.int64, "u8": torch.uint8}
COUNTS = [0, 1, 1001, 5 * CHUNK_BYTES + 77]

CASES = harness.Cases()


def _payload(dt, count, rank, salt):
    """Small integers: exact in every dtype, different per rank and position."""
    return ((torch.arange(count, dtype=torch.int64) * 7 + rank * 31 + salt) % 251).to(dt)


def _gather_both_forms(ctx, dt, count, salt):
    """all_gather (list) and all_gather_into_tensor of this rank's payload; checked against the closed form."""
    mine = _payload(dt, count, ctx.rank, salt).to(ctx.device)
    outs = [torch.zeros(count, dtype=dt, device=ctx.device) for _ in range(ctx.size)]
    dist.all_gather(outs, mine)
    flat = torch.zeros(ctx.size * count, dtype=dt, device=ctx.device)
    dist.all_gather_into_tensor(flat, mine)
    want = torch.cat([_payload(dt, count, r, salt) for r in range(ctx.size)])
    got_list = torch.cat([o.cpu() for o in outs])
    assert _same_bits(got_list, want), f"all_gather {dt} n={count}"
    assert _same_bits(flat.cpu(), want), f"all_gather_into_tensor {dt} n={count}"
    return got_list, flat.cpu()


@CASES.case("enabled-only-on-cuda")
def _(ctx):
    import ringguard.policy as policy

    # RINGGUARD_POLICY_FORCE=all_gather=staged_chunked (the launch's environment) pins the variant, but a
    # forced variant still has to be enabled: on a CPU engine it is not, and all_gather stays on the ring.
    policy.load(device=torch.device("cpu"))
    policy.step()
    assert policy.current("all_gather") == "ring", policy.current("all_gather")
    policy.load(device=torch.device("cuda", 0))  # only the engine's device type matters here
    policy.step()
    assert policy.current("all_gather") == "staged_chunked", policy.current("all_gather")
    return {"current": policy.current("all_gather")}


@CASES.case("cpu-tensors-never-staged")
def _(ctx):
    import ringguard.policy as policy

    policy.load(device=torch.device("cuda", 0))  # staged_chunked enabled and forced
    policy.step()
    assert policy.current("all_gather") == "staged_chunked"
    before = policy.staged_all_gathers()
    for dname, dt in DTYPES.items():
        for count in COUNTS:
            x = _payload(dt, count, ctx.rank, 5).cpu()
            outs = [torch.zeros(count, dtype=dt) for _ in range(ctx.size)]
            dist.all_gather(outs, x)
            flat = torch.zeros(ctx.size * count, dtype=dt)
            dist.all_gather_into_tensor(flat, x)
            want = torch.cat([_payload(dt, count, r, 5) for r in range(ctx.size)])
            assert _same_bits(torch.cat(outs), want), f"all_gather {dname} n={count}"
            assert _same_bits(flat, want), f"all_gather_into_tensor {dname} n={count}"
    assert policy.staged_all_gathers() == before == 0, (before, policy.staged_all_gathers())
    return {"staged": policy.staged_all_gathers()}


@CASES.case("cuda-staged-equals-ring")
def _(ctx):
    import ringguard.policy as policy

    if ctx.device != "cuda":
        raise harness.Skip("CUDA runs only")
    policy.load()  # the current CUDA device
    staged.select("all_gather", "ring")
    assert policy.current("all_gather") == "ring"
    ring = {}
    for dname, dt in DTYPES.items():
        for count in COUNTS:
            ring[dname, count] = _gather_both_forms(ctx, dt, count, 9)
    assert policy.staged_all_gathers() == 0, "the ring variant took the staged path"

    policy.engine().force("all_gather", "staged_chunked")
    # Selected but not yet in effect: decisions take effect at a step boundary.
    assert policy.current("all_gather") == "ring"
    policy.step()
    assert policy.current("all_gather") == "staged_chunked"
    calls = 0
    for dname, dt in DTYPES.items():
        for count in COUNTS:
            got_list, got_flat = _gather_both_forms(ctx, dt, count, 9)
            calls += 2
            want_list, want_flat = ring[dname, count]
            assert _same_bits(got_list, want_list), f"all_gather {dname} n={count}: staged != ring"
            assert _same_bits(got_flat, want_flat), f"all_gather_into_tensor {dname} n={count}: staged != ring"
    # In place, as FSDP gathers its parameters.
    count = 3 * CHUNK_BYTES + 5
    out = torch.zeros(ctx.size * count, dtype=torch.float32, device="cuda")
    out.narrow(0, ctx.rank * count, count).copy_(_payload(torch.float32, count, ctx.rank, 4).cuda())
    dist.all_gather_into_tensor(out, out.narrow(0, ctx.rank * count, count))
    calls += 1
    want = torch.cat([_payload(torch.float32, count, r, 4) for r in range(ctx.size)])
    assert _same_bits(out.cpu(), want), "in-place all_gather_into_tensor"
    assert policy.staged_all_gathers() == calls, (policy.staged_all_gathers(), calls)

    staged.select("all_gather", "ring")  # and back
    _gather_both_forms(ctx, torch.float32, 1001, 3)
    assert policy.staged_all_gathers() == calls
    return {"staged": calls}


# --- pytest side ------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def run(request):
    return staged.launch_cpu(__file__, request.param, "all_gather")


@pytest.mark.parametrize("name", staged.cpu_case_names(CASES))
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


def test_cuda_staged_equals_ring():
    harness.check_case(CASES, staged.launch_cuda(__file__), staged.CUDA_CASE)


if __name__ == "__main__":
    staged.worker_main(CASES)
