"""The daemon never touches anything outside the backing directory: symlinks in the backing store
are shown as symlinks, and replaced or removed as links, never followed by the daemon.
"""

import os
import shutil
import tempfile
import unittest

from ckptfs_testing.harness import CkptfsMount, require_fuse


class BackingSymlinkTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        self.outside = tempfile.mkdtemp(prefix="ckptfs-outside-")
        self.target = os.path.join(self.outside, "target")
        with open(self.target, "w") as f:
            f.write("outside")
        self.addCleanup(shutil.rmtree, self.outside, ignore_errors=True)

    def test_symlinks_to_outside_are_never_followed_by_the_daemon(self):
        with CkptfsMount(options=["flush_delay=0"]) as m:
            os.symlink(self.target, m.bpath("file_link"))
            os.symlink(self.outside, m.bpath("dir_link"))
            os.symlink(self.target, m.bpath("doomed_link"))
            self.assertTrue(os.path.islink(m.path("file_link")))
            self.assertEqual(os.readlink(m.path("dir_link")), self.outside)
            # Renaming a new file over a link replaces the link, not what it points to.
            with open(m.path("new"), "w") as f:
                f.write("inside")
            os.rename(m.path("new"), m.path("file_link"))
            os.unlink(m.path("doomed_link"))
            m.sync()
            self.assertFalse(os.path.islink(m.bpath("file_link")))
            with open(m.bpath("file_link")) as f:
                self.assertEqual(f.read(), "inside")
            self.assertFalse(os.path.lexists(m.bpath("doomed_link")))
            self.assertTrue(os.path.islink(m.bpath("dir_link")))
            self.assertEqual(sorted(os.listdir(self.outside)), ["target"])
            with open(self.target) as f:
                self.assertEqual(f.read(), "outside")
            self.assertEqual(m.unmount(), 0)


if __name__ == "__main__":
    unittest.main()
