"""prefault=on: the daemon faults its whole cache in on a background thread once the mount has
had no file open for 10 s (policy::kPrefaultQuiet), so that a resume load right after mounting
does not compete with it; files are written and read as usual meanwhile; an unmount stops a
prefault that has not finished."""

import os
import time
import unittest

from ckptfs_testing.harness import CkptfsMount, require_fuse

MiB = 1 << 20
QUIET = 10  # seconds: policy::kPrefaultQuiet


def wait_for_prefault(test, m, limit=QUIET + 50):
    deadline = time.monotonic() + limit
    while m.stats()["prefault_running"]:
        test.assertLess(time.monotonic(), deadline, "the prefault did not finish")
        time.sleep(0.2)


class PrefaultTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def test_whole_cache_is_faulted_in_once_no_file_is_open(self):
        data = os.urandom(8 * MiB)
        output = []
        with CkptfsMount(options=["cache_size=64M", "prefault=on", "flush_delay=0"]) as m:
            m.on_exit(lambda: output.append(m.output()))
            with open(m.path("f"), "wb") as f:
                f.write(data)
                # An open file holds the prefault back, however long it stays open.
                time.sleep(QUIET + 1)
                self.assertEqual(m.stats()["memory_prefaulted"], 0)
            wait_for_prefault(self, m)
            stats = m.stats()
            self.assertEqual(stats["memory_prefaulted"], 64 * MiB)
            self.assertEqual(stats["memory_mapped"], 64 * MiB)
            self.assertGreaterEqual(m.vm_hwm_kib() << 10, 64 * MiB)
            with open(m.path("f"), "rb") as f:
                self.assertEqual(f.read(), data)
            m.sync()
            with open(m.bpath("f"), "rb") as f:
                self.assertEqual(f.read(), data)
        self.assertIn("prefaulted the cache's 64 MiB", output[0])

    def test_unmount_stops_a_prefault_that_has_not_finished(self):
        output = []
        with CkptfsMount(options=["cache_size=4G", "prefault=on"]) as m:
            m.on_exit(lambda: output.append(m.output()))
            self.assertTrue(m.stats()["prefault_running"])
        self.assertEqual(m.returncode, 0)
        self.assertIn("prefault stopped by unmount", output[0])

    def test_off_by_default(self):
        with CkptfsMount(options=["cache_size=64M"]) as m:
            time.sleep(QUIET + 1)
            stats = m.stats()
            self.assertFalse(stats["prefault_running"])
            self.assertEqual(stats["memory_prefaulted"], 0)
            self.assertEqual(stats["memory_mapped"], 0)


if __name__ == "__main__":
    unittest.main()
