"""Real PyTorch DCP saving many small tensors from one process (FileSystemWriter's defaults: one
thread, every file fsynced; one small write per tensor): the save through the mount matches a
plain directory and loads back."""

import unittest

from ckptfs_testing import workloads
from ckptfs_testing.e2e_check import check_workload


class DCPSmallTest(unittest.TestCase):
    def test_a_save_of_thousands_of_small_tensors_matches_a_plain_directory(self):
        check_workload(self, workloads.make("dcp_small", for_test=True))


if __name__ == "__main__":
    unittest.main(verbosity=2)
