"""FSDP2 (`torch.distributed.fsdp.fully_shard`) over the "ringguard" backend, on CPU, and with
RINGGUARD_TEST_DEVICE=cuda on the GPU (every rank on the one GPU: the peer windows by default, the staged
transport beneath them).

A small MLP, each Linear and the whole model sharded, trained for 6 SGD steps with the same seed and
per-rank data over "ringguard" and over gloo in the same job. FSDP2 all-gathers the parameters
(all_gather_into_tensor / allgather_into_tensor_coalesced) and reduce-scatters the gradients
(reduce_scatter_tensor). The full parameters must be bit-identical on every rank; against gloo they are
bit-identical at 2 ranks (inputs and weights are multiples of powers of two, so every sum and the halving
of AVG are exact) and within allclose(rtol=1e-6, atol=1e-7) at 3 ranks, where dividing by 3 rounds and
FSDP2 over gloo divides in another place than the ring; with injected corruptions they must be
bit-identical to the clean run, every injection detected and repaired. On CUDA the reference is FSDP2 over
gloo with the same CUDA tensors (gloo copies them to host and reduce-scatters through its all-reduce): the
same GPU kernels on both sides, so the same bounds hold. (Against a CPU run they would not: after a few
steps the values are no longer short dyadic fractions, and the GPU's matmuls round differently.)
"""

import os

import hashlib
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import harness

STEPS = 6
CASES = harness.Cases()


def _model():
    torch.manual_seed(7)
    layers = [nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 8)]
    with torch.no_grad():
        for m in layers:
            if isinstance(m, nn.Linear):
                # Multiples of 1/64 in [-1, 1): products and sums of a few steps stay exact in fp32.
                m.weight.copy_(torch.randint(-64, 64, m.weight.shape).float() / 64)
                m.bias.copy_(torch.randint(-64, 64, m.bias.shape).float() / 64)
    return nn.Sequential(*layers)


def train(ctx, group, divide_factor=None, force_sum=False, device="cpu"):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    model = _model().to(device)
    mesh = DeviceMesh.from_group(group, torch.device(device).type)
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for m in model.modules():
        if divide_factor is not None and hasattr(m, "set_gradient_divide_factor"):
            m.set_gradient_divide_factor(divide_factor)  # fp32: a PREMUL_SUM(1 / factor) reduce-scatter
        if force_sum and hasattr(m, "set_force_sum_reduction_for_comms"):
            m.set_force_sum_reduction_for_comms(True)  # SUM with pre / post division (what gloo can run)
    opt = torch.optim.SGD(model.parameters(), lr=0.25)
    for step in range(STEPS):
        g = torch.Generator().manual_seed(100 * ctx.rank + step)
        x = (torch.randint(-4, 4, (16, 32), generator=g).float() / 4).to(device)
        loss = model(x).sum() / 1024
        loss.backward()
        opt.step()
        opt.zero_grad()
    full = [p.full_tensor().detach().cpu().clone() for p in model.parameters()]
    h = hashlib.sha256(b"".join(t.numpy().tobytes() for t in full)).hexdigest()
    return full, h


def _compare(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b)), all(
        torch.allclose(x, y, rtol=1e-6, atol=1e-7) for x, y in zip(a, b))


def _check_same_everywhere(results, nproc):
    assert len({r["hash"] for r in results}) == 1, f"ranks differ: {results}"
    for rank, r in enumerate(results):
        assert r["allclose_gloo"], f"rank {rank}: parameters differ from FSDP2 over gloo: {r}"
        if nproc == 2:
            assert r["identical_to_gloo"], f"rank {rank}: not bit-identical to FSDP2 over gloo: {r}"


@CASES.case("fsdp2-matches-gloo", check=_check_same_everywhere)
def _(ctx):
    full, h = train(ctx, dist.new_group(backend="ringguard"), device=ctx.device)
    gfull, _ = train(ctx, ctx.ref, device=ctx.device)
    same, close = _compare(full, gfull)
    return {"hash": h, "identical_to_gloo": same, "allclose_gloo": close}


# A gradient divide factor of 4: FSDP2 reduce-scatters with PREMUL_SUM(0.25) (every rank's gradient times
# 0.25, then summed). Gloo has no PREMUL_SUM, so the reference is FSDP2 over gloo forced to SUM, which
# divides by 2 before and by 2 after; both scalings are exact (powers of two), so at 2 ranks (one sum per
# element, commutative) the parameters must be bit-identical, at 3 allclose (another summation order).
@CASES.case("fsdp2-gradient-divide-factor", check=_check_same_everywhere)
def _(ctx):
    full, h = train(ctx, dist.new_group(backend="ringguard"), device=ctx.device, divide_factor=4.0)
    gfull, _ = train(ctx, ctx.ref, divide_factor=4.0, force_sum=True, device=ctx.device)
    plain, _ = train(ctx, dist.new_group(backend="ringguard"), device=ctx.device)
    same, close = _compare(full, gfull)
    assert not _compare(full, plain)[0], "the divide factor changed nothing"
    return {"hash": h, "identical_to_gloo": same, "allclose_gloo": close}


def _check_faults(results, nproc):
    assert len({r["hash"] for r in results}) == 1, f"ranks differ: {results}"
    assert sum(r["injected"] for r in results) > 0, f"nothing injected: {results}"
    for rank, r in enumerate(results):
        assert r["identical_to_clean"], f"rank {rank}: parameters differ from the clean run: {r}"
        assert r["detected"] == r["injected"] and r["escaped"] == 0, f"rank {rank}: {r}"


@CASES.case("fsdp2-with-faults", check=_check_faults)
def _(ctx):
    import ringguard

    clean, _ = train(ctx, dist.new_group(backend="ringguard"), device=ctx.device)
    rg = dist.new_group(backend="ringguard", pg_options=ringguard.Options(
        slice_bytes=1024, fault_mode="bitflip", fault_prob=0.2, fault_seed=3))
    full, h = train(ctx, rg, device=ctx.device)
    c = ringguard.counters(rg)
    return {"hash": h, "identical_to_clean": _compare(full, clean)[0],
            "injected": c["injected"], "detected": c["detected"], "escaped": c["escaped"]}


def _init():
    if os.environ.get("RINGGUARD_TEST_DEVICE") == "cuda":
        torch.cuda.set_device(0)  # every rank on the one GPU: ringguard stages through the host
        torch.backends.cuda.matmul.allow_tf32 = False
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))


# --- pytest side ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def run(request):
    return harness.launch(__file__, request.param)


@pytest.mark.parametrize("name", CASES.names)
def test_case(run, name):
    harness.check_case(CASES, run, name)


def test_launch(run):
    harness.check_launch(run)


if __name__ == "__main__":
    harness.run_worker(CASES, _init)
