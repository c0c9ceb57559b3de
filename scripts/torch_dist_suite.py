#!/usr/bin/env python3
"""PyTorch's own distributed test suite (``_DistTestBase``, unmodified) over the "ringguard" backend, as
torch's test/distributed/test_distributed_spawn.py runs it for gloo and nccl (docs/TORCH.md, "PyTorch's own
test suite"). Needs the installed package and ``expecttest`` (torch's test utilities import it):

    python3 -m pip install expecttest
    WORLD_SIZE=2 python3 scripts/torch_dist_suite.py -v -k all_gather_coalesced -k any_source

Arguments go to unittest (``-k`` selects tests by substring). BACKEND defaults to ringguard, WORLD_SIZE to 2.
"""

import os
import tempfile

os.environ.setdefault("BACKEND", "ringguard")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="rg_dist_suite_"))

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
