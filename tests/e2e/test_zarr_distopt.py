"""Megatron-core's distributed optimizer saved with the zarr backend, alone (workloads.ZarrDistOpt):
2 rank processes, per rank one chunk holding its whole flattened optimizer shard, filled by 60
uneven set_coordinate_selection pieces under a zarr.ProcessSynchronizer; read back by both
loaders (slice by slice, and Megatron's: every piece re-reads its rank's whole region). The
arrays must be served with a fine chunk grid; everything else is check_workload's.
"""

import unittest

from ckptfs_testing import workloads
from ckptfs_testing.e2e_check import check_workload


class ZarrDistOptTest(unittest.TestCase):
    def test_zarr_distributed_optimizer(self):
        w = workloads.make("zarr_distopt", for_test=True)
        stats = check_workload(self, w, loads=(w.load, w.load_whole_region))
        self.assertEqual(sorted(a["path"] for a in stats["zarr_fine_grid"]),
                         sorted(w.key(kind) for kind in w.kinds))


if __name__ == "__main__":
    unittest.main()
