"""Megatron-core / NeMo distributed checkpoint, zarr backend, 2 rank processes, including the
distributed-optimizer pattern (per-parameter set_coordinate_selection into one big chunk per rank
under a zarr.ProcessSynchronizer), then a resharding-style load."""

import unittest

from ckptfs_testing import workloads
from ckptfs_testing.e2e_check import check_workload


class ZarrDistTest(unittest.TestCase):
    def test_zarr_distributed_checkpoint(self):
        check_workload(self, workloads.make("zarr_dist", for_test=True))


if __name__ == "__main__":
    unittest.main(verbosity=2)
