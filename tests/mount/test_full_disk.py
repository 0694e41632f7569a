"""A full backing store: writes through the mount still succeed, flushes fail with ENOSPC,
`ckptfs sync` fails naming the files, .ckptfs/stats shows it, nothing closed later is published
ahead of it, and once space is freed the data lands byte-exact without remounting. A writer that
waits for memory the flusher cannot free (a spill or a flush fails) is told why (stats, status,
metrics, sync) and a fatal signal ends its wait; an unmount's rescue copy is complete or absent.

The backing directory is a size-limited tmpfs (root only).
"""

import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest

from ckptfs_testing.harness import (MiB, CkptfsMount, StreamWriter, require_fuse, require_root,
                                    run_ckptfs, stream_bytes, wait_for)

FLUSH_ERRORS = [r"flush failed"]
STUCK = r"writers wait for memory, retried"


class FullDiskTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        require_root()
        self.store = tempfile.mkdtemp(prefix="ckptfs-full-")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "ckptfs-test", self.store],
                           capture_output=True, text=True)
        if r.returncode != 0:
            os.rmdir(self.store)
            self.skipTest(f"cannot mount a tmpfs: {r.stderr.strip()}")

    def tearDown(self):
        subprocess.run(["umount", "-l", self.store], capture_output=True)
        os.rmdir(self.store)

    def resize_store(self, size):
        subprocess.run(["mount", "-o", f"remount,size={size}", self.store], check=True)

    def kill_stuck_writer(self, m, writer, sig):
        """A fatal signal `sig` ends the write `writer` waits in (EINTR, as on other
        filesystems): the writer exits and no writer waits any more. Returns the bytes its
        writes acknowledged."""
        wait_for(lambda: m.stats()["writers_waiting"] == 1, 60, lambda: "a waiting writer")
        acknowledged = writer.acknowledged()
        os.kill(writer.proc.pid, sig)
        writer.proc.join(60)
        self.assertFalse(writer.proc.is_alive(), "the killed writer stays in its write")
        self.assertEqual(writer.proc.exitcode, -sig)
        wait_for(lambda: m.stats()["writers_waiting"] == 0, 60, lambda: "no waiting writer")
        return acknowledged

    def assert_prefix_landed(self, m, name, acknowledged):
        """Once space is freed, `name` lands on the backing store with every acknowledged byte
        (and at most the rest of the 1 MiB write that was killed)."""
        self.resize_store("256m")
        r = run_ckptfs(["sync", m.mnt], timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.store, name), "rb") as f:
            landed = f.read()
        self.assertGreaterEqual(len(landed), acknowledged)
        self.assertLessEqual(len(landed), acknowledged + MiB)
        self.assertTrue(landed == stream_bytes(len(landed)), f"{name} differs from what was written")

    def test_a_writer_stuck_on_a_spill_to_a_full_store_is_told_why_and_a_kill_ends_its_wait(self):
        self.resize_store("8m")
        metrics = os.path.join(tempfile.mkdtemp(prefix="ckptfs-metrics-"), "ckptfs.prom")
        self.addCleanup(shutil.rmtree, os.path.dirname(metrics), True)
        options = ["cache_size=16M", f"metrics_file={metrics}", "metrics_interval=100ms"]
        with CkptfsMount(options, backing=self.store, expect_errors=[STUCK]) as m, \
                StreamWriter(m.path("big.bin"), [120]) as writer:
            # Retried with back-off, reported once. Memory a retry frees may let the writer on for
            # a moment (seen once in CI): it waits again after.
            wait_for(lambda: m.stats()["spill_errors"] >= 3, 60, lambda: m.stats())
            wait_for(lambda: m.stats()["writers_waiting"] == 1, 60, lambda: m.stats())
            stats = m.stats()
            self.assertIn("big.bin", stats["spill_error"])
            self.assertIn("No space left on device", stats["spill_error"])
            self.assertEqual(len(re.findall(STUCK, m.output())), 1, m.output()[-3000:])
            status = run_ckptfs(["status", m.mnt])
            self.assertIn("stuck: cannot spill big.bin", status.stdout)
            wait_for(lambda: re.search(r"^ckptfs_spill_failing\{[^}]*\} 1$", open(metrics).read(),
                                       re.M), 30, lambda: open(metrics).read())
            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertNotEqual(r.returncode, 0, "sync succeeded while a writer is stuck")
            self.assertIn("big.bin", r.stderr)
            self.assertIn("No space left on device", r.stderr)

            acknowledged = self.kill_stuck_writer(m, writer, signal.SIGKILL)
            self.assertEqual(m.stats()["spill_error"], "")
            self.assert_prefix_landed(m, "big.bin", acknowledged)
            self.assertEqual(m.unmount(), 0)

    def test_a_writer_held_back_by_flushes_to_a_full_store_ends_at_a_fatal_signal(self):
        self.resize_store("8m")
        with CkptfsMount(["cache_size=16M"], backing=self.store,
                         expect_errors=FLUSH_ERRORS + [STUCK]) as m:
            with StreamWriter(m.path("closed.bin"), [12]) as closed:
                self.assertEqual(closed.result(60), "ok")
            wait_for(lambda: m.stats()["flush_errors"] > 0, 60, lambda: m.stats())
            with StreamWriter(m.path("open.bin"), [64]) as writer:
                # Python does not catch SIGTERM: it is fatal.
                acknowledged = self.kill_stuck_writer(m, writer, signal.SIGTERM)
            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("No space left on device", r.stderr)
            self.assert_prefix_landed(m, "open.bin", acknowledged)
            with open(os.path.join(self.store, "closed.bin"), "rb") as f:
                self.assertTrue(f.read() == stream_bytes(12 * MiB))
            self.assertEqual(m.unmount(), 0)

    def test_sync_names_every_file_not_durable_and_bytes_flushed_counts_only_durable_ones(self):
        # 7.2 MiB on a 4 MiB store: the first file that does not fit is written in part, then
        # fails, at every retry.
        names = [f"shard_{i:02d}.bin" for i in range(12)]
        data = {name: os.urandom(600 << 10) for name in names}
        with CkptfsMount(["cache_size=64M"], backing=self.store, expect_errors=FLUSH_ERRORS) as m:
            for name in names:
                with open(m.path(name), "wb") as f:
                    f.write(data[name])
            wait_for(lambda: m.stats()["flush_errors"] >= 3, 60, lambda: m.stats())
            published = sorted(n for n in os.listdir(self.store) if n in data)
            self.assertLess(len(published), len(names))
            durable = sum(os.path.getsize(os.path.join(self.store, n)) for n in published)
            self.assertEqual(m.stats()["bytes_flushed"], durable, "failed attempts counted")
            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertNotEqual(r.returncode, 0)
            for name in names:
                if name not in published:
                    self.assertIn(name, r.stderr, "sync names every file not durable")
            self.assertIn(f"{len(names) - len(published)} files are not durable", r.stderr)

            self.resize_store("64m")
            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(m.stats()["bytes_flushed"], len(names) * (600 << 10))
            self.assertEqual(m.unmount(), 0)

    def test_an_unmount_that_rescues_to_var_tmp_leaves_no_incomplete_copy_in_the_store(self):
        self.resize_store("16m")
        data = os.urandom(24 << 20)
        with CkptfsMount(["cache_size=64M", "unmount_timeout=1s"], backing=self.store,
                         expect_errors=FLUSH_ERRORS + [r"unmount:"]) as m:
            os.mkdir(m.path("iter_0000100"))
            with open(m.path("iter_0000100", "model.pt"), "wb") as f:
                f.write(data)
            self.assertNotEqual(m.unmount(), 0, "unmount claimed success on a full disk")
            found = re.search(r"saved to (/var/tmp/ckptfs-rescue-[^\s:]+)", m.output())
            self.assertIsNotNone(found, m.output()[-2000:])
            rescue = found.group(1)
            try:
                with open(os.path.join(rescue, "iter_0000100", "model.pt"), "rb") as f:
                    self.assertTrue(f.read() == data, "the rescue copy differs")
            finally:
                shutil.rmtree(rescue, ignore_errors=True)
            self.assertEqual(glob.glob(os.path.join(self.store, ".ckptfs", "rescue-*")), [],
                             "an incomplete rescue copy was left in the backing store")

    def test_enospc_is_reported_and_the_data_lands_after_space_is_freed(self):
        data = os.urandom(16 << 20)
        options = ["flush_delay=0", "cache_size=64M"]
        with CkptfsMount(options=options, backing=self.store, expect_errors=FLUSH_ERRORS) as m:
            with open(m.path("model.pt"), "wb") as f:
                f.write(data)
            with open(m.path("latest_checkpointed_iteration.txt"), "w") as f:
                f.write("100")

            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertNotEqual(r.returncode, 0, "sync succeeded on a full backing store")
            self.assertIn("model.pt", r.stderr)
            self.assertIn("No space left on device", r.stderr)
            self.assertIn("model.pt", m.stats()["last_error"])
            self.assertFalse(os.path.exists(os.path.join(self.store, "model.pt")))
            self.assertFalse(
                os.path.exists(os.path.join(self.store, "latest_checkpointed_iteration.txt")),
                "the tracker reached the backing store before the data it follows")
            with open(m.path("model.pt"), "rb") as f:
                self.assertEqual(f.read(), data, "staged data changed while flushes failed")

            subprocess.run(["mount", "-o", "remount,size=64m", self.store], check=True)
            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertEqual(r.returncode, 0, f"sync still fails after space was freed: {r.stderr}")
            with open(os.path.join(self.store, "model.pt"), "rb") as f:
                self.assertEqual(f.read(), data)
            with open(os.path.join(self.store, "latest_checkpointed_iteration.txt")) as f:
                self.assertEqual(f.read(), "100")
            self.assertEqual(m.stats()["last_error"], "")
            self.assertEqual(m.unmount(), 0)
        self.assertEqual(os.listdir(os.path.join(self.store, ".ckptfs", "staging")), [])

    def test_read_only_backing_store_then_writable_again(self):
        data = os.urandom(1 << 20)
        with CkptfsMount(options=["flush_delay=0"], backing=self.store,
                         expect_errors=FLUSH_ERRORS) as m:
            subprocess.run(["mount", "-o", "remount,ro", self.store], check=True)
            try:
                with open(m.path("model.pt"), "wb") as f:
                    f.write(data)
                r = run_ckptfs(["sync", m.mnt], timeout=60)
                self.assertNotEqual(r.returncode, 0, "sync succeeded on a read-only store")
                self.assertIn("model.pt", r.stderr)
                self.assertIn("Read-only file system", r.stderr)
            finally:
                subprocess.run(["mount", "-o", "remount,rw", self.store], check=True)
            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(self.store, "model.pt"), "rb") as f:
                self.assertEqual(f.read(), data)
            self.assertEqual(m.unmount(), 0)


if __name__ == "__main__":
    unittest.main()
