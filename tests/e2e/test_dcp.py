"""PyTorch DCP FileSystemWriter's file pattern, by hand: 2 ranks x 2 writer threads each write one
__R_I.distcp (torch.save per tensor, fsync at the end), then .metadata.tmp is written, fsynced
and renamed to .metadata. Run with fsync=wait (the default) and fsync=defer."""

import unittest

import workloads
from e2e_check import check_workload


class DCPTest(unittest.TestCase):
    def test_dcp_fsync_wait(self):
        check_workload(self, workloads.make("dcp", for_test=True),
                       options=("cache_size=1G", "fsync=wait"))

    def test_dcp_fsync_defer(self):
        check_workload(self, workloads.make("dcp", for_test=True),
                       options=("cache_size=1G", "fsync=defer"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
