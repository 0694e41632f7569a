"""Real PyTorch DCP through the mount: dcp.save from 2 ranks (FileSystemWriter with 2 threads and
an fsync of every file), loaded back resharded (by 1 and by 3 ranks), and dcp.async_save with the
thread and the process executors."""

import os
import tempfile
import unittest

import workloads
from ckptfs_daemon import CkptfsDaemon, describe_tree_diff, snapshot
from e2e_check import E2E_TMP, check_workload, remove_tmp, require_fuse


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

    def test_async_saves_with_thread_and_process_executors_load_back_and_reach_the_backing_store(self):
        require_fuse()
        tmp = tempfile.mkdtemp(prefix="ckptfs-e2e-dcp-async-", dir=E2E_TMP)
        backing, mnt = os.path.join(tmp, "backing"), os.path.join(tmp, "mount")
        os.mkdir(backing)
        os.mkdir(mnt)
        d = CkptfsDaemon(backing, mnt, ("cache_size=1G",), log_file=os.path.join(tmp, "daemon.log"))
        self.addCleanup(remove_tmp, tmp)
        self.addCleanup(d.cleanup)
        d.start()
        # One-letter directories: .metadata records its directory, so equal lengths give equal sizes.
        self.w.save(os.path.join(mnt, "s"))
        for executor, sub in (("thread", "t"), ("process", "p")):
            blocked, done = self.w.save_async(os.path.join(mnt, sub), executor)
            self.assertLessEqual(blocked, done)
            self.assertEqual(self.w.load(os.path.join(mnt, sub), ranks=2), self.w.expected_digest(),
                             f"async_save ({executor}) read back different data")
        d.sync()
        expected = snapshot(os.path.join(backing, "s"))
        for sub in ("t", "p"):
            got = snapshot(os.path.join(backing, sub))
            for tree in (expected, got):
                tree[".metadata"] = tree[".metadata"][:3]  # A random save id: size only.
            self.assertEqual(expected, got, describe_tree_diff(expected, got, "save", "async_save"))
        self.assertEqual(d.unmount(), 0, d.output()[-3000:])
        self.assertEqual(d.error_lines(), [], "the daemon logged errors")


if __name__ == "__main__":
    unittest.main(verbosity=2)
