"""prefault (on by default): the daemon faults its whole cache in on a background thread once the
mount has had no file open for 10 s (policy::kPrefaultQuiet), so that a resume load right after
mounting does not compete with it; files are written and read as usual meanwhile; an unmount
stops a prefault that has not finished. Prefault or not, the memory the cache holds and no file
uses goes back to the system when less than an eighth of the system's memory is available."""

import os
import subprocess
import sys
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
        with CkptfsMount(options=["cache_size=64M", "flush_delay=0"]) as m:  # The default.
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

    def test_off_leaves_the_cache_unmapped_until_used(self):
        with CkptfsMount(options=["cache_size=64M", "prefault=off"]) as m:
            time.sleep(QUIET + 1)
            stats = m.stats()
            self.assertFalse(stats["prefault_running"])
            self.assertEqual(stats["memory_prefaulted"], 0)
            self.assertEqual(stats["memory_mapped"], 0)

    def test_idle_cache_memory_goes_back_when_the_system_runs_short(self):
        # A process takes the system's memory until less than an eighth of it is available (an
        # eighth less 128 MiB: well above what the kernel needs), and holds it.
        data = os.urandom(16 * MiB)
        output = []
        with CkptfsMount(options=["cache_size=2G", "flush_delay=0"]) as m:
            m.on_exit(lambda: output.append(m.output()))
            with open(m.path("f"), "wb") as f:
                f.write(data)
            wait_for_prefault(self, m)
            self.assertEqual(m.stats()["memory_prefaulted"], 2 << 30)
            self.assertEqual(m.stats()["memory_given_back"], 0)
            hog = subprocess.Popen([sys.executable, "-c", MEMORY_HOG], stdout=subprocess.PIPE,
                                   text=True)
            try:
                self.assertEqual(hog.stdout.readline().strip(), "short",
                                 "the memory hog could not make the system short of memory")
                deadline = time.monotonic() + 30
                while m.stats()["memory_given_back"] == 0:
                    self.assertLess(time.monotonic(), deadline, "no idle memory went back")
                    time.sleep(0.2)
                given = m.stats()["memory_given_back"]
                # The shortfall at the daemon's look and policy::kGiveBackMargin (256 MiB).
                self.assertGreaterEqual(given, 256 * MiB)
                self.assertLess(given, 2 << 30)
            finally:
                hog.kill()
                hog.wait()
            with open(m.path("f"), "rb") as f:
                self.assertEqual(f.read(), data)
            with open(m.path("g"), "wb") as f:
                f.write(data)
            with open(m.path("g"), "rb") as f:
                self.assertEqual(f.read(), data)
            m.sync()
        self.assertIn("of idle cache memory back", output[0])


# Takes memory 64 MiB at a time (touched) until MemAvailable is an eighth of MemTotal less
# 128 MiB, prints "short" and holds it until killed.
MEMORY_HOG = """
import time
import numpy as np

def meminfo(key):
    with open("/proc/meminfo") as f:
        return next(int(l.split()[1]) << 10 for l in f if l.startswith(key + ":"))

target = meminfo("MemTotal") // 8 - (128 << 20)
held = []
while meminfo("MemAvailable") > target:
    held.append(np.ones(64 << 20, dtype=np.uint8))
print("short", flush=True)
while True:
    time.sleep(1)
"""

if __name__ == "__main__":
    unittest.main()
