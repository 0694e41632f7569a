"""Flush failures are reported, not lost: `ckptfs sync` fails naming the file, flushing recovers
when the backing store does, and an unmount that cannot flush rescues the data and exits
non-zero. Also checks that the harness fails a test whose daemon logged an unexpected error.

Failures are provoked with an immutable backing directory (chattr +i; root only, ext4/xfs/...).
"""

import glob
import os
import re
import shutil
import subprocess
import time
import unittest

from ckptfs_testing.harness import CkptfsMount, require_fuse, require_root, run_ckptfs

FLUSH_ERRORS = [r"flush failed", r"refused", r"unmount:", r"directory sync failed"]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def chattr(flag, path):
    return subprocess.run(["chattr", flag, path], capture_output=True, text=True)


class FlushErrorTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        require_root()
        if not shutil.which("chattr"):
            self.skipTest("chattr is not installed")

    def make_immutable_dir(self, m):
        os.mkdir(m.path("d"))
        m.sync()
        r = chattr("+i", m.bpath("d"))
        if r.returncode != 0:
            self.skipTest(f"the backing file system has no immutable flag: {r.stderr.strip()}")
        # Undone when the mount is left (before the harness removes its temp dirs).
        m.on_exit(lambda: chattr("-i", m.bpath("d")))

    def test_sync_reports_failure_then_recovers(self):
        with CkptfsMount(options=["flush_delay=0"], expect_errors=FLUSH_ERRORS) as m:
            self.make_immutable_dir(m)
            with open(m.path("d", "f"), "wb") as f:
                f.write(b"must not be lost")
            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertNotEqual(r.returncode, 0, "sync succeeded although d/f cannot be written")
            self.assertIn("d/f", r.stderr, f"sync does not name the file: {r.stderr!r}")
            stats = m.stats()
            self.assertGreater(stats["flush_errors"], 0, stats)
            self.assertNotEqual(stats["last_error"], "", stats)
            # The data is still readable, and a reader's close is not told; the next close of
            # the file by a writer reports the failure.
            self.assertEqual(read(m.path("d", "f")), b"must not be lost")
            fd = os.open(m.path("d", "f"), os.O_RDWR)
            self.assertEqual(os.read(fd, 100), b"must not be lost")
            with self.assertRaises(PermissionError):
                os.close(fd)
            self.assertEqual(read(m.path("d", "f")), b"must not be lost")  # Reported once.
            chattr("-i", m.bpath("d"))
            m.sync()
            self.assertEqual(read(m.bpath("d", "f")), b"must not be lost")
            self.assertEqual(m.stats()["last_error"], "")
            self.assertEqual(m.unmount(), 0)

    def test_unmount_that_cannot_flush_rescues_data(self):
        with CkptfsMount(options=["flush_delay=0", "unmount_timeout=1s"],
                         expect_errors=FLUSH_ERRORS) as m:
            self.make_immutable_dir(m)
            with open(m.path("d", "g"), "wb") as f:
                f.write(b"rescue me")
            t0 = time.monotonic()
            code = m.unmount(timeout=30)
            self.assertNotEqual(code, 0, "unmount exited 0 although d/g never reached BACKING")
            self.assertLess(time.monotonic() - t0, 20)
            rescued = [p for p in glob.glob(m.bpath(".ckptfs", "rescue*", "**"), recursive=True)
                       if os.path.isfile(p)]
            self.assertTrue(any(read(p) == b"rescue me" for p in rescued),
                            f"d/g not found in the rescue directory: {rescued}")
            self.assertTrue(any("d/g" in l for l in m.error_lines()), m.error_lines())

    def test_harness_fails_on_unexpected_daemon_error(self):
        with self.assertRaises(AssertionError) as cm:
            with CkptfsMount(options=["flush_delay=0"]) as m:
                self.make_immutable_dir(m)
                with open(m.path("d", "f"), "wb") as f:
                    f.write(b"x")
                deadline = time.monotonic() + 20
                while not m.error_lines() and time.monotonic() < deadline:
                    time.sleep(0.05)
                chattr("-i", m.bpath("d"))
                m.sync()
                self.assertEqual(m.unmount(), 0)
        self.assertIn("unexpected errors", str(cm.exception))


class BackingRemovedTest(unittest.TestCase):
    """The backing directory deleted under a live mount: nothing can be flushed any more; the
    error says so, and unmount saves the unflushed data to /var/tmp and exits non-zero."""

    def setUp(self):
        require_fuse()

    def test_removed_backing_directory_is_reported_and_rescued(self):
        data = os.urandom(3 << 20)
        with CkptfsMount(options=["flush_delay=60s", "unmount_timeout=1s"],
                         expect_errors=FLUSH_ERRORS) as m:
            os.mkdir(m.path("iter_0000100"))
            with open(m.path("iter_0000100", "model.pt"), "wb") as f:
                f.write(data)
            shutil.rmtree(m.backing)
            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertNotEqual(r.returncode, 0, "sync succeeded without a backing directory")
            self.assertIn("was removed", r.stderr)
            self.assertIn("was removed", m.stats()["last_error"])
            with open(m.path("iter_0000100", "model.pt"), "rb") as f:
                self.assertEqual(f.read(), data, "the data is still served")
            self.assertNotEqual(m.unmount(), 0, "unmount claimed success")
            found = re.search(r"saved to (/var/tmp/ckptfs-rescue-[^\s:]+)", m.output())
            self.assertIsNotNone(found, m.output()[-2000:])
            try:
                self.assertEqual(read(os.path.join(found.group(1), "iter_0000100", "model.pt")),
                                 data)
            finally:
                shutil.rmtree(found.group(1), ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
