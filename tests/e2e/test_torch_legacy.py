"""torch.save / torch.load of a GPT state dict through ckptfs, Megatron legacy layout
(iter_0000100/mp_rank_00/model_optim_rng.pt, then latest_checkpointed_iteration.txt)."""

import unittest

from ckptfs_testing import workloads
from ckptfs_testing.e2e_check import check_workload


class TorchLegacyTest(unittest.TestCase):
    def test_torch_save_legacy_layout(self):
        check_workload(self, workloads.make("torch_legacy", for_test=True))

    def test_torch_save_larger_than_cache(self):
        """The ~180 MiB model_optim_rng.pt is bigger than a 64 MiB cache: it streams through."""
        check_workload(self, workloads.make("torch_legacy", for_test=True),
                       options=("cache_size=64M", "flush_delay=50ms"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
