"""Test 10: permissions and ownership for other users (as root, with -o allow_other)."""

import errno
import os
import shutil
import subprocess
import sys
import unittest

from harness import CkptfsMount, require_fuse, require_root

NOBODY = 65534


def as_nobody(code, *args):
    """Runs python code as uid/gid 65534 with no supplementary groups."""
    if shutil.which("setpriv"):
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
               sys.executable, "-c", code, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd="/")
    # Fallback: drop privileges in a forked child.
    def demote():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=30, cwd="/", preexec_fn=demote)


READ = "import sys; print(open(sys.argv[1], 'rb').read().decode())"
WRITE = "import sys; open(sys.argv[1], 'w').write(sys.argv[2]); import os; os.mkdir(sys.argv[1] + '.d')"


class PermissionTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        require_root()

    def test_private_file_not_readable_by_others(self):
        with CkptfsMount(options=["allow_other"]) as m:
            path = m.path("secret")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, b"root only")
            os.close(fd)
            with open(m.path("public"), "wb") as f:
                f.write(b"for all")
            os.chmod(m.path("public"), 0o644)
            r = as_nobody(READ, m.path("public"))
            self.assertEqual(r.returncode, 0, f"uid {NOBODY} cannot read a 0644 file: {r.stderr}")
            self.assertEqual(r.stdout.strip(), "for all")
            r = as_nobody(READ, path)
            self.assertNotEqual(r.returncode, 0, "uid 65534 read a 0600 root file")
            self.assertIn("PermissionError", r.stderr)
            m.sync()
            self.assertEqual(os.stat(m.bpath("secret")).st_mode & 0o777, 0o600)
            self.assertEqual(m.unmount(), 0)

    def test_files_of_other_users_keep_their_owner(self):
        with CkptfsMount(options=["allow_other"]) as m:
            os.mkdir(m.path("shared"))
            os.chmod(m.path("shared"), 0o777)
            os.mkdir(m.path("closed"), 0o755)
            r = as_nobody(WRITE, m.path("shared", "mine"), "by nobody")
            self.assertEqual(r.returncode, 0, r.stderr)
            r = as_nobody(WRITE, m.path("closed", "mine"), "by nobody")
            self.assertNotEqual(r.returncode, 0, "uid 65534 created a file in a 0755 root dir")
            for name in ("mine", "mine.d"):
                st = os.stat(m.path("shared", name))
                self.assertEqual((st.st_uid, st.st_gid), (NOBODY, NOBODY), f"mount: {name}")
            m.sync()
            for name in ("mine", "mine.d"):
                st = os.stat(m.bpath("shared", name))
                self.assertEqual((st.st_uid, st.st_gid), (NOBODY, NOBODY), f"BACKING: {name}")
            with open(m.bpath("shared", "mine")) as f:
                self.assertEqual(f.read(), "by nobody")
            self.assertFalse(os.path.exists(m.bpath("closed", "mine")))
            self.assertEqual(m.unmount(), 0)

    def test_control_commands_only_from_the_mounting_user(self):
        with CkptfsMount(options=["allow_other", "flush_delay=60s"]) as m:
            with open(m.path("data"), "wb") as f:
                f.write(b"x" * 1000)
            control = m.path(".ckptfs", "sync")
            r = as_nobody("import sys; open(sys.argv[1], 'w').write('sync')", control)
            self.assertNotEqual(r.returncode, 0, "uid 65534 gave a command")
            self.assertIn("PermissionError", r.stderr)
            r = as_nobody(READ, control)
            self.assertIn("PermissionError", r.stderr)
            r = as_nobody(READ, m.path(".ckptfs", "stats"))
            self.assertEqual(r.returncode, 0, "stats are readable by all: " + r.stderr)
            self.assertFalse(os.path.exists(m.bpath("data")), "flushed before the command")
            for garbage in (b"flush", b"sync sync", b"\x00\xff" * 100, b"sync\n\nx"):
                fd = os.open(control, os.O_WRONLY)
                with self.assertRaises(OSError) as cm:
                    os.write(fd, garbage)
                os.close(fd)
                self.assertEqual(cm.exception.errno, errno.EINVAL, garbage)
            with self.assertRaises(PermissionError):
                open(m.path(".ckptfs", "new"), "w")
            with open(control, "w") as f:
                f.write("sync\n")  # Returns once everything closed before is durable.
            with open(m.bpath("data"), "rb") as f:
                self.assertEqual(f.read(), b"x" * 1000)
            self.assertEqual(m.unmount(), 0)


if __name__ == "__main__":
    unittest.main()
