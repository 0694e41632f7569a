"""Shared mode (-o shared): two mounts over one backing directory, as on two nodes. Each sees what
the other made durable within the attribute timeout (about a second: the tests poll, and never
time it), and a directory made through one is there for the other at once. A third mount under a
live member's node name is refused, and never logs that it serves."""

import contextlib
import os
import shutil
import tempfile
import time
import unittest

from ckptfs_testing.ckptfs_daemon import read_or_none
from ckptfs_testing.harness import CkptfsMount, require_fuse

POLL_LIMIT = 20.0  # Seconds a poll waits before the test fails (the contract says ~1 s).


def wait_until(check, describe):
    """Polls check() until it is true; fails with describe() after POLL_LIMIT seconds."""
    deadline = time.monotonic() + POLL_LIMIT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {POLL_LIMIT}s: {describe()}")
        time.sleep(0.05)


class SharedViewTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        self.backing = tempfile.mkdtemp(prefix="ckptfs-shared-")
        self.addCleanup(shutil.rmtree, self.backing, ignore_errors=True)
        stack = contextlib.ExitStack()
        self.addCleanup(stack.close)
        self.a = stack.enter_context(CkptfsMount(options=["shared", "node=a"], backing=self.backing))
        self.b = stack.enter_context(CkptfsMount(options=["shared", "node=b"], backing=self.backing))

    def test_a_mount_under_a_live_members_node_name_is_refused_and_never_says_it_serves(self):
        second = CkptfsMount(options=["shared", "node=a"], backing=self.backing)
        with self.assertRaises(RuntimeError) as refused:
            second.__enter__()  # Cleans up after itself when it fails.
        log = str(refused.exception)
        self.assertIn("node name a is in use by a live member", log)
        self.assertNotIn("mounted", log.replace("unmounted", ""))
        self.assertTrue(os.path.exists(self.a.path()), "the live member's mount went away")

    def test_a_file_synced_through_one_mount_is_read_through_the_other(self):
        for content in (b"first version", b"second version, longer than the first", b"third"):
            with open(self.a.path("model.pt"), "wb") as f:
                f.write(content)
            self.a.sync()
            wait_until(lambda: read_or_none(self.b.path("model.pt")) == content,
                       lambda: f"b reads {read_or_none(self.b.path('model.pt'))!r}, "
                               f"a wrote {content!r}")

    def test_a_directory_listed_before_the_other_mount_added_files_shows_them(self):
        os.mkdir(self.a.path("ckpt"))
        self.assertEqual(os.listdir(self.b.path("ckpt")), [])
        for rank in range(2):
            with open(self.a.path("ckpt", f"rank{rank}"), "wb") as f:
                f.write(b"shard %d" % rank)
        self.a.sync()
        wait_until(lambda: sorted(os.listdir(self.b.path("ckpt"))) == ["rank0", "rank1"],
                   lambda: f"b lists {sorted(os.listdir(self.b.path('ckpt')))}")
        self.assertEqual(read_or_none(self.b.path("ckpt", "rank1")), b"shard 1")

    def test_a_directory_made_through_one_mount_takes_files_through_the_other_at_once(self):
        os.listdir(self.b.mnt)  # b has read the root before the directory is made.
        os.mkdir(self.a.path("iter_0000100"))
        # As ranks on other nodes after the barrier that follows rank 0's mkdir: no waiting.
        with open(self.b.path("iter_0000100", "rank1.distcp"), "wb") as f:
            f.write(b"rank 1")
        self.b.sync()
        self.a.sync()
        self.assertEqual(read_or_none(os.path.join(self.backing, "iter_0000100", "rank1.distcp")),
                         b"rank 1")
        wait_until(lambda: read_or_none(self.a.path("iter_0000100", "rank1.distcp")) == b"rank 1",
                   lambda: "a does not read the file b wrote")


if __name__ == "__main__":
    unittest.main()
