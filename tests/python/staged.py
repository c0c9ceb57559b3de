"""What the staged variants' test modules (test_staged_allgather.py, test_staged_allreduce.py) share: the
bitwise comparison, pinning a collective family's variant, and their launches (CPU: np 2 and 3 with the
staged variant forced; CUDA: 2 ranks sharing the GPU through the staged device transport, the CUDA case
only). RINGGUARD_STAGED_CHUNK_BYTES is CHUNK_BYTES, so the larger counts take several chunks."""

import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import harness

CHUNK_BYTES = 4096
ENV = {"RINGGUARD_STAGED_CHUNK_BYTES": str(CHUNK_BYTES)}
CUDA_CASE = "cuda-staged-equals-ring"


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def select(family, variant):
    """Pins `family` to `variant` and takes a step: the selection the backend reads from then on."""
    import ringguard.policy as policy

    policy.engine().force(family, variant)
    policy.step()


def launch_cpu(script, nproc, family):
    """The CPU cases, with RINGGUARD_POLICY_FORCE=<family>=staged_chunked in the launch's environment."""
    return harness.launch(script, nproc, env=dict(ENV, RINGGUARD_POLICY_FORCE=f"{family}=staged_chunked"))


def launch_cuda(script):
    """The CUDA case on 2 ranks sharing the GPU; skips the test without one."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: 2 ranks on one GPU with RINGGUARD_DEVICE_TRANSPORT=staged")
    return harness.launch(script, 2, env=dict(ENV, RINGGUARD_TEST_DEVICE="cuda", RINGGUARD_DEVICE_TRANSPORT="staged",
                                              RINGGUARD_TEST_ONLY=CUDA_CASE))


def cpu_case_names(cases):
    return [n for n in cases.names if n != CUDA_CASE]


def worker_main(cases):
    """The worker side: the rank's GPU (CUDA runs), then every case over a "ringguard" default group."""
    if os.environ.get("RINGGUARD_TEST_DEVICE") == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    harness.run_worker(cases, lambda: dist.init_process_group("ringguard", timeout=timedelta(seconds=120)))
