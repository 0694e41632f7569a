"""-o io_uring=on (fs/fuse_ring.h): the requests of a mount are served over FUSE over io_uring,
with the same results as over /dev/fuse; the mount is refused with a clear line when the kernel
does not offer it, and an upgrade (a worker cannot hand its ring over) while the worker serves on. The fuse module's enable_uring is set for each test and put back
after (root only)."""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from ckptfs_testing.harness import CkptfsMount, require_fuse, require_root, run_ckptfs

ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"


def reap(proc):
    """Kills and waits for `proc`, a process the test started."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


class FuseRingTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        require_root()
        if not os.path.exists(ENABLE_URING):
            self.skipTest("this kernel has no FUSE over io_uring (no enable_uring parameter)")
        with open(ENABLE_URING) as f:
            before = f.read().strip()
        self.addCleanup(self.set_enable_uring, before)

    def set_enable_uring(self, value):
        with open(ENABLE_URING, "w") as f:
            f.write(value)

    def ring_requests(self, m):
        return m.stats()["worker"]["io_uring_requests"]

    def read_requests(self, m):
        """READ requests the mount has answered (cumulative: the histogram's last count)."""
        return m.stats()["fuse_request_seconds"].get("read", {"counts": [0]})["counts"][-1]

    def test_a_mount_without_the_kernels_offer_is_refused_naming_enable_uring(self):
        self.set_enable_uring("N")
        work = os.path.realpath(tempfile.mkdtemp(prefix="ckptfs-ring-"))
        try:
            os.mkdir(os.path.join(work, "b"))
            os.mkdir(os.path.join(work, "m"))
            r = run_ckptfs([os.path.join(work, "b"), os.path.join(work, "m"), "-o", "io_uring=on"])
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("enable_uring", r.stderr)
            self.assertFalse(os.path.ismount(os.path.join(work, "m")))
            self.assertEqual(os.listdir(os.path.join(work, "b")), [])
        finally:
            shutil.rmtree(work)

    def test_files_written_read_renamed_and_removed_over_the_ring_match_what_was_written(self):
        self.set_enable_uring("Y")
        big = os.urandom(3 << 20) + b"tail"  # Three full write requests, then a short one.
        small = {f"f{i}.bin": os.urandom(100 + 997 * i) for i in range(20)}
        backing = os.path.realpath(tempfile.mkdtemp(prefix="ckptfs-ring-backing-"))
        self.addCleanup(shutil.rmtree, backing, ignore_errors=True)
        with CkptfsMount(options=["io_uring=on", "passthrough=off"], backing=backing) as m:
            served = self.ring_requests(m)
            os.mkdir(m.path("d"))
            for name, data in small.items():
                with open(m.path("d", name), "wb") as f:
                    f.write(data)
            with open(m.path("big"), "wb") as f:
                f.write(big)
                os.fsync(f.fileno())
            os.rename(m.path("d", "f0.bin"), m.path("d", "renamed.bin"))
            os.unlink(m.path("d", "f1.bin"))
            self.assertEqual(sorted(os.listdir(m.path("d"))),
                             sorted(["renamed.bin"] + [n for n in small if n not in ("f0.bin", "f1.bin")]))
            for name in list(small)[2:]:
                with open(m.path("d", name), "rb") as f:
                    self.assertEqual(f.read(), small[name])
            self.assertGreater(self.ring_requests(m) - served, 3 * len(small))
            m.sync()
        with open(os.path.join(backing, "big"), "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).digest(), hashlib.sha256(big).digest())
        # A fresh mount reads the large file past the page cache (direct reads): its data is
        # spliced from the backing file into the ring's reply.
        with CkptfsMount(options=["io_uring=on", "passthrough=off"], backing=backing) as m2:
            served = self.ring_requests(m2)
            with open(m2.path("big"), "rb") as f:
                self.assertEqual(f.read(), big)
            with open(m2.path("d", "renamed.bin"), "rb") as f:
                self.assertEqual(f.read(), small["f0.bin"])
            self.assertGreater(self.ring_requests(m2) - served, len(big) >> 20)

    def test_small_files_loaded_over_the_ring_come_whole_from_the_page_cache_filled_at_open(self):
        # Default options otherwise: opening a small file the backing store holds fills the
        # kernel's page cache (a notification written to /dev/fuse) before the open's reply goes
        # to its ring entry. The worker once took the notification for that reply and crashed.
        self.set_enable_uring("Y")
        files = {f"f{i}.bin": os.urandom(4096 * (i + 2) + i) for i in range(8)}
        backing = os.path.realpath(tempfile.mkdtemp(prefix="ckptfs-ring-backing-"))
        self.addCleanup(shutil.rmtree, backing, ignore_errors=True)
        with CkptfsMount(options=["io_uring=on"], backing=backing) as m:
            for name, data in files.items():
                with open(m.path(name), "wb") as f:
                    f.write(data)
            m.sync()
        with CkptfsMount(options=["io_uring=on"], backing=backing) as m:
            worker = m.worker_pid()
            reads = self.read_requests(m)
            reader = ("import hashlib, sys\n"
                      "for p in sys.argv[1:]:\n"
                      "    print(hashlib.sha256(open(p, 'rb').read()).hexdigest())\n")
            proc = subprocess.Popen([sys.executable, "-c", reader] + [m.path(n) for n in files],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.addCleanup(reap, proc)  # After the mount is gone: an unanswered open ends.
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.fail("the reader's open was never answered (the worker died: see its log)")
            self.assertEqual(proc.returncode, 0, err)
            self.assertEqual(out.split(), [hashlib.sha256(d).hexdigest() for d in files.values()])
            self.assertEqual(m.worker_pid(), worker)
            # Only reading the stats themselves costs READs (one or two), not the files.
            self.assertLessEqual(self.read_requests(m) - reads, 2)
            self.assertGreater(self.ring_requests(m), 2 * len(files))

    def test_an_upgrade_is_refused_and_the_worker_serves_on_over_the_ring(self):
        self.set_enable_uring("Y")
        with CkptfsMount(options=["io_uring=on", "passthrough=off"],
                         expect_errors=[r"handoff failed, serving on: .*io_uring=on"]) as m:
            writing = open(m.path("open.bin"), "wb", buffering=0)
            writing.write(b"o" * 100000)
            before = m.stats()["worker"]
            r = run_ckptfs(["upgrade", m.mnt, "--timeout", "30"], timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("io_uring=on", r.stdout + r.stderr)
            served = self.ring_requests(m)
            writing.write(b"p" * 100000)
            writing.close()
            with open(m.path("open.bin"), "rb") as f:
                self.assertEqual(f.read(), b"o" * 100000 + b"p" * 100000)
            after = m.stats()["worker"]
            self.assertEqual((after["number"], after["pid"]), (before["number"], before["pid"]))
            self.assertGreater(self.ring_requests(m) - served, 3)


if __name__ == "__main__":
    unittest.main()
