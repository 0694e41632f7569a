"""Real PyTorch DCP through the mount: dcp.save from 2 ranks (FileSystemWriter with 2 threads and
an fsync of every file), loaded back resharded (by 1 and by 3 ranks), and dcp.async_save with the
thread and the process executors."""

import os
import unittest

from ckptfs_testing import workloads
from ckptfs_testing.ckptfs_daemon import describe_tree_diff, snapshot
from ckptfs_testing.e2e_check import check_workload, comparable, fresh_mount


class DCPTest(unittest.TestCase):
    def setUp(self):
        self.w = workloads.make("dcp", for_test=True)

    def test_a_save_matches_a_plain_directory_and_loads_resharded_by_one_and_by_three_ranks(self):
        w = self.w

        def load_by_one_rank(root):
            return w.load(root, ranks=1)

        def load_by_three_ranks(root):
            return w.load(root, ranks=3)
        check_workload(self, w, loads=(load_by_one_rank, load_by_three_ranks))

    def test_a_save_with_fsync_wait_matches_a_plain_directory(self):
        check_workload(self, self.w, options=("cache_size=1G", "fsync=wait"))

    def test_a_save_with_verify_markers_reads_every_byte_back_and_matches_a_plain_directory(self):
        def every_byte_read_back(stats):
            self.assertEqual(stats["checksum_mismatches"], 0, stats)
            self.assertGreater(stats["bytes_checksummed"], 0, stats)
            self.assertEqual(stats["bytes_read_back"], stats["bytes_checksummed"], stats)
        check_workload(self, self.w, options=("cache_size=1G", "verify=markers"),
                       synced=every_byte_read_back)

    def test_async_saves_with_thread_and_process_executors_load_back_and_reach_the_backing_store(self):
        d, backing, mnt = fresh_mount(self, "ckptfs-e2e-dcp-async-")
        # One-letter directories: .metadata records its directory, so equal lengths give equal sizes.
        self.w.save(os.path.join(mnt, "s"))
        for executor, sub in (("thread", "t"), ("process", "p")):
            running = self.w.save_async(os.path.join(mnt, sub), executor)
            self.assertEqual(running, [True] * self.w.ranks,
                             f"async_save ({executor}) returned after its save had finished")
            # The ranks changed their tensors once async_save returned: the save holds the
            # values they had at the call.
            self.assertEqual(self.w.load(os.path.join(mnt, sub), ranks=2), self.w.expected_digest(),
                             f"async_save ({executor}) read back different data")
        d.sync()
        expected = comparable(snapshot(os.path.join(backing, "s")), self.w.varying)
        for sub in ("t", "p"):
            got = comparable(snapshot(os.path.join(backing, sub)), self.w.varying)
            self.assertEqual(expected, got, describe_tree_diff(expected, got, "save", "async_save"))
        self.assertEqual(d.unmount(), 0, d.output()[-3000:])
        self.assertEqual(d.error_lines(), [], "the daemon logged errors")


if __name__ == "__main__":
    unittest.main(verbosity=2)
