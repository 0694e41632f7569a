"""NVRx local checkpointing through ckptfs: LocalCheckpointManager saves of a Megatron
MCoreTensorAwareStateDict from 2 ranks (open "bx" of a .dirty.pt name, torch.save, rename, no
fsync), two iterations in a row with the older one unlinked, then a restarted job's
find_latest and load."""

import unittest

from ckptfs_testing import workloads
from ckptfs_testing.e2e_check import check_workload


class NVRxLocalTest(unittest.TestCase):
    def test_two_saves_in_a_row_leave_the_last_iteration_only_and_a_restarted_job_loads_it(self):
        check_workload(self, workloads.make("nvrx_local", for_test=True))


if __name__ == "__main__":
    unittest.main(verbosity=2)
