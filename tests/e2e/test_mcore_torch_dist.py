"""Megatron-core dist_checkpointing with the torch_dist backend through the mount: the fully
parallel save of 2 TP ranks, synchronous and asynchronous (AsyncCallsQueue), each loaded back
with another parallel layout (TP 2 -> 1)."""

import os
import unittest

from ckptfs_testing import workloads
from ckptfs_testing.ckptfs_daemon import describe_tree_diff, snapshot
from ckptfs_testing.e2e_check import check_workload, comparable, fresh_mount


class MCoreTorchDistTest(unittest.TestCase):
    def setUp(self):
        self.w = workloads.make("mcore_torch_dist", for_test=True)

    def test_a_save_matches_a_plain_directory_and_loads_with_tensor_parallel_one(self):
        check_workload(self, self.w)

    def test_an_async_save_finalized_through_the_mount_equals_the_synchronous_one(self):
        d, backing, mnt = fresh_mount(self, "ckptfs-e2e-mcore-async-")
        # One-letter directories: .metadata records its directory, so equal lengths give equal sizes.
        self.w.save(os.path.join(mnt, "s"))
        for rank in self.w.save_async(os.path.join(mnt, "a")):
            self.assertEqual(rank["when_scheduled"], [], "markers of the save before it was finalized")
            self.assertEqual(rank["when_finalized"], [".metadata", "metadata.json"])
        self.assertEqual(self.w.load(os.path.join(mnt, "a")), self.w.expected_digest(),
                         "the async save read back different data")
        d.sync()
        saved, saved_async = (comparable(snapshot(os.path.join(backing, sub)), self.w.varying)
                              for sub in ("s", "a"))
        self.assertEqual(saved, saved_async,
                         describe_tree_diff(saved, saved_async, "save", "async save"))
        self.assertEqual(d.unmount(), 0, d.output()[-3000:])
        self.assertEqual(d.error_lines(), [], "the daemon logged errors")


if __name__ == "__main__":
    unittest.main(verbosity=2)
