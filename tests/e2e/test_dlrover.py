"""DLRover flash-checkpoint layout: 4 rank processes write mp_rank_TT_PPP/model_optim_rng.pt and
rank_RRRR/distrib_optim.pt in parallel; the tracker file last."""

import unittest

from ckptfs_testing import workloads
from ckptfs_testing.e2e_check import check_workload


class DLRoverTest(unittest.TestCase):
    def test_dlrover_flash_checkpoint(self):
        check_workload(self, workloads.make("dlrover", for_test=True))


if __name__ == "__main__":
    unittest.main(verbosity=2)
