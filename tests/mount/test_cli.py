"""Test 8: bad command lines fail with one 'ckptfs:' line and leave nothing behind."""

import os
import shutil
import subprocess
import tempfile
import unittest

from ckptfs_testing.harness import (CkptfsMount, ckptfs_bin, force_unmount, mounted, require_fuse,
                                    run_ckptfs)


class BadInputTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        self.dir = os.path.realpath(tempfile.mkdtemp(prefix="ckptfs-cli-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.backing = os.path.join(self.dir, "backing")
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.backing)
        os.mkdir(self.mnt)
        self.addCleanup(self.unmount_if_mounted, self.mnt)

    def unmount_if_mounted(self, path):
        if mounted(path):
            force_unmount(path)
            self.fail(f"{path} was left mounted")

    def assert_refused(self, args, backing=None, mnt=None, foreground=True):
        """Runs ckptfs with args; it must exit non-zero at once with one 'ckptfs:' stderr line,
        create nothing in the backing dir and mount nothing."""
        backing = backing or self.backing
        mnt = mnt or self.mnt
        before = sorted(os.listdir(backing)) if os.path.isdir(backing) else None
        mounts_before = mounted(mnt) if os.path.isdir(mnt) else False
        cmd = [ckptfs_bin()] + args + (["-f"] if foreground else [])
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=15,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            force_unmount(mnt)
            self.fail(f"{args}: ckptfs did not exit (it mounted?)")
        lines = r.stderr.splitlines()
        self.assertNotEqual(r.returncode, 0, f"{args}: exit 0, stderr {r.stderr!r}")
        self.assertEqual(len(lines), 1, f"{args}: expected one stderr line, got {r.stderr!r}")
        self.assertTrue(lines[0].startswith("ckptfs:"), f"{args}: {lines[0]!r}")
        self.assertEqual(r.stdout, "", f"{args}: stdout {r.stdout!r}")
        if before is not None:
            self.assertEqual(sorted(os.listdir(backing)), before,
                             f"{args}: the backing dir was changed")
        if os.path.isdir(mnt):
            self.assertEqual(mounted(mnt), mounts_before, f"{args}: mount state changed")
        return lines[0]

    def test_missing_backing(self):
        missing = os.path.join(self.dir, "nope")
        self.assert_refused([missing, self.mnt])
        self.assert_refused([missing, self.mnt], foreground=False)
        self.assertFalse(os.path.exists(missing))

    def test_backing_is_a_file(self):
        path = os.path.join(self.dir, "file")
        with open(path, "w") as f:
            f.write("x")
        self.assert_refused([path, self.mnt])
        with open(path) as f:
            self.assertEqual(f.read(), "x")

    def test_missing_mountpoint(self):
        self.assert_refused([self.backing, os.path.join(self.dir, "nomnt")])
        self.assert_refused([self.backing, os.path.join(self.dir, "nomnt")], foreground=False)

    def test_mountpoint_is_a_file(self):
        path = os.path.join(self.dir, "file")
        open(path, "w").close()
        self.assert_refused([self.backing, path])

    def test_mountpoint_already_mounted(self):
        with CkptfsMount() as m:
            self.assert_refused([self.backing, m.mnt])
            self.assert_refused([self.backing, m.mnt], foreground=False)
            self.assertTrue(os.path.isdir(m.path(".ckptfs")))  # The first mount still works.
            self.assertEqual(m.unmount(), 0)

    def test_mountpoint_inside_backing(self):
        inner = os.path.join(self.backing, "inner")
        os.mkdir(inner)
        self.assert_refused([self.backing, inner])

    def test_bad_options(self):
        for opts in ["cache_size=banana", "cache_size=1M", "cache_size=", "nosuchopt",
                     "flush_delay=soon", "fsync=maybe", "queue_depth=0", "flush_io=fast",
                     "log_level=loud", "max_read=2M", "max_read=1", "direct_read=yes",
                     "passthrough=maybe", "prefault=yes"]:
            with self.subTest(opts=opts):
                line = self.assert_refused([self.backing, self.mnt, "-o", opts])
                self.assertIn(opts.split("=")[0], line)
        self.assert_refused([self.backing, self.mnt, "-o", "nosuchopt"], foreground=False)
        self.assert_refused([self.backing, self.mnt, "--no-such-flag"])
        self.assert_refused([self.backing])

    def test_cache_larger_than_physical_memory(self):
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        if memory >= 100 << 40:
            self.skipTest("this machine has 100 TiB of memory or more")
        for foreground in (True, False):
            line = self.assert_refused([self.backing, self.mnt, "-o", "cache_size=100T"],
                                       foreground=foreground)
            self.assertIn("cache_size 100.0 TiB", line)
            self.assertIn(f"{memory / (1 << 30):.1f} GiB", line)

    def test_help_and_version(self):
        r = run_ckptfs(["--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("BACKING", r.stdout)
        r = run_ckptfs(["--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout.strip(), r"^ckptfs \d+\.\d+")

    def test_client_on_a_non_mount(self):
        for args in (["sync", self.mnt], ["status", self.mnt], ["status", self.mnt, "--json"],
                     ["sync", os.path.join(self.dir, "missing")]):
            with self.subTest(args=args):
                r = run_ckptfs(args, timeout=15)
                self.assertNotEqual(r.returncode, 0, r)
                self.assertTrue(r.stderr.startswith("ckptfs"), r.stderr)

    def test_client_on_a_mount(self):
        with CkptfsMount() as m:
            r = run_ckptfs(["status", m.mnt])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("backend", r.stdout)
            r = run_ckptfs(["status", m.mnt, "--json"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn('"files_flushed"', r.stdout)
            self.assertEqual(run_ckptfs(["sync", m.mnt]).returncode, 0)
            self.assertEqual(m.unmount(), 0)

    def test_daemon_mode_returns_once_mounted(self):
        """Without -f the command returns once the mount is live; SIGTERM-free unmount ends it."""
        r = subprocess.run([ckptfs_bin(), self.backing, self.mnt], capture_output=True, text=True,
                           timeout=30, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            self.assertTrue(mounted(self.mnt))
            with open(os.path.join(self.mnt, "f"), "wb") as f:
                f.write(b"daemon")
        finally:
            subprocess.run(["fusermount3", "-u", self.mnt], timeout=30)
        # The daemon flushes at unmount before it exits; give it a moment.
        for _ in range(100):
            if os.path.exists(os.path.join(self.backing, "f")):
                break
            import time
            time.sleep(0.05)
        with open(os.path.join(self.backing, "f"), "rb") as f:
            self.assertEqual(f.read(), b"daemon")


if __name__ == "__main__":
    unittest.main()
