"""A full backing store: writes through the mount still succeed, flushes fail with ENOSPC,
`ckptfs sync` fails naming the files, .ckptfs/stats shows it, nothing closed later is published
ahead of it, and once space is freed the data lands byte-exact without remounting. An unmount's
rescue copy is complete or absent.

The backing directory is a size-limited tmpfs (root only).
"""

import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from harness import CkptfsMount, require_fuse, require_root, run_ckptfs, wait_for

FLUSH_ERRORS = [r"flush failed"]


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

    def test_sync_names_every_file_not_durable_and_bytes_flushed_counts_only_durable_ones(self):
        names = [f"shard_{i:02d}.bin" for i in range(12)]
        data = {name: os.urandom(512 << 10) for name in names}  # 6 MiB on a 4 MiB store.
        with CkptfsMount(["cache_size=64M"], backing=self.store, expect_errors=FLUSH_ERRORS) as m:
            for name in names:
                with open(m.path(name), "wb") as f:
                    f.write(data[name])
            # Failed batches are retried, rewriting what fits.
            wait_for(lambda: m.stats()["flush_errors"] >= 3, 60, lambda: m.stats())
            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertNotEqual(r.returncode, 0)
            published = sorted(n for n in os.listdir(self.store) if n in data)
            self.assertLess(len(published), len(names))
            for name in names:
                if name not in published:
                    self.assertIn(name, r.stderr, "sync names every file not durable")
            self.assertIn(f"{len(names) - len(published)} files are not durable", r.stderr)
            durable = sum(os.path.getsize(os.path.join(self.store, n)) for n in published)
            self.assertEqual(m.stats()["bytes_flushed"], durable)

            self.resize_store("64m")
            r = run_ckptfs(["sync", m.mnt], timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(m.stats()["bytes_flushed"], len(names) * (512 << 10))
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
