"""Where the cache's memory lives under the default options (fs/huge_pages.h, README:
cache_memory, huge_pages): shared memory the supervisor holds, with huge pages also on a kernel
that gives shared memory none (set for the test as Debian's and Ubuntu's kernels ship, and
restored after), unless the mount is told to leave the kernel alone."""

import unittest

from ckptfs_testing.harness import (CkptfsMount, THP_SHMEM, kernel_without_huge_pages,
                                    require_fuse, shared_memory_huge_pages_kib, shm_huge)

WRITTEN = 64 << 20


def write_and_keep_open(m, name):
    f = open(m.path(name), "wb", buffering=0)
    for _ in range(WRITTEN >> 20):
        f.write(b"x" * (1 << 20))
    return f


class CacheMemoryTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        self.enterContext(kernel_without_huge_pages())

    def test_the_default_mount_gives_its_shared_cache_huge_pages_on_a_kernel_that_gives_none(self):
        with CkptfsMount() as m:
            self.assertEqual(shm_huge(), "advise", "/dev/shm's tmpfs is set to give huge pages")
            self.assertIn("set huge=advise on the tmpfs on /dev/shm", m.output())
            with write_and_keep_open(m, "model.pt"):
                self.assertTrue(m.stats()["cache_shared"])
                self.assertGreater(shared_memory_huge_pages_kib(m.worker_pid()), 0,
                                   "the worker's cache has no huge pages")
            self.assertEqual(m.unmount(), 0)

    def test_huge_pages_leave_keeps_the_kernels_settings_and_the_cache_shared(self):
        with CkptfsMount(["huge_pages=leave"]) as m:
            self.assertEqual(shm_huge(), "never")
            with open(THP_SHMEM) as f:
                self.assertIn("[never]", f.read())
            self.assertIn("the cache's memory gets small pages", m.output())
            with write_and_keep_open(m, "model.pt"):
                self.assertTrue(m.stats()["cache_shared"])
                self.assertEqual(shared_memory_huge_pages_kib(m.worker_pid()), 0)
            self.assertEqual(m.unmount(), 0)
            with open(m.bpath("model.pt"), "rb") as f:
                self.assertEqual(len(f.read()), WRITTEN)

    def test_a_private_cache_is_said_at_mount(self):
        with CkptfsMount(["cache_memory=private"]) as m:
            self.assertIn("a worker's death ends the mount", m.output())
            self.assertFalse(m.stats()["cache_shared"])
            self.assertEqual(m.unmount(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
