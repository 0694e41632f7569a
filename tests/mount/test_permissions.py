"""Test 10: permissions and ownership for other users (as root, with -o allow_other)."""

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from ckptfs_testing.harness import CkptfsMount, require_fuse, require_root

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
# Each argument PATH:HOW changes PATH one way: a write through a descriptor opened O_WRONLY (the
# mount bypasses the page cache), O_RDWR (through it) or O_APPEND, an open with O_TRUNC, truncate.
CHANGE = """
import os, sys
FLAGS = {"wronly": os.O_WRONLY, "rdwr": os.O_RDWR, "append": os.O_WRONLY | os.O_APPEND,
         "trunc": os.O_WRONLY | os.O_TRUNC}
for arg in sys.argv[1:]:
    path, how = arg.rsplit(":", 1)
    if how == "truncate":
        os.truncate(path, 1)
        continue
    fd = os.open(path, FLAGS[how])
    if how != "trunc":
        os.write(fd, b"w")
    os.close(fd)
"""
# name: (mode, how uid 65534 changes it).
SET_ID_FILES = {"suid-wronly": (0o4777, "wronly"), "suid-rdwr": (0o4777, "rdwr"),
                "suid-append": (0o4777, "append"), "suid-trunc": (0o4777, "trunc"),
                "suid-truncate": (0o4777, "truncate"), "sgid-wronly": (0o2777, "wronly"),
                "both-trunc": (0o6777, "trunc"), "both-rdwr": (0o6777, "rdwr")}


def set_id_modes_after_changes(root):
    """Makes SET_ID_FILES in root (owned by root), lets uid 65534 change each; returns
    {name: mode} after, and what went wrong in the child."""
    for name, (mode, _) in SET_ID_FILES.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(b"data")
        os.chmod(os.path.join(root, name), mode)
    changes = [f"{os.path.join(root, n)}:{how}" for n, (_, how) in SET_ID_FILES.items()]
    r = as_nobody(CHANGE, *changes)
    return {n: oct(os.stat(os.path.join(root, n)).st_mode & 0o7777) for n in SET_ID_FILES}, r.stderr


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

    def test_changes_by_another_user_clear_set_id_bits(self):
        """A write or truncation by a user without CAP_FSETID clears set-user-ID, and
        set-group-ID with group execute, whichever way it reaches the mount, as on a plain
        directory; the backing store gets the cleared modes."""
        plain = tempfile.mkdtemp(prefix="ckptfs-plain-")
        self.addCleanup(shutil.rmtree, plain, True)
        os.chmod(plain, 0o755)
        want, err = set_id_modes_after_changes(plain)
        self.assertEqual(err, "")
        self.assertNotIn("0o4777", want.values(), "the plain directory kept a set-user-ID bit")
        with CkptfsMount(options=["allow_other", "flush_delay=60s"]) as m:
            got, err = set_id_modes_after_changes(m.mnt)
            self.assertEqual(err, "")
            self.assertEqual(got, want, "modes on the mount (second) against a plain directory")
            m.sync()
            backing = {n: oct(os.stat(m.bpath(n)).st_mode & 0o7777) for n in SET_ID_FILES}
            self.assertEqual(backing, want, "modes on the backing store after sync")
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
