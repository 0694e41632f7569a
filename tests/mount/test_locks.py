"""Test 7: POSIX record locks (fcntl F_SETLK) work across processes on the mount."""

import errno
import fcntl
import os
import struct
import subprocess
import sys
import unittest

from ckptfs_testing.harness import CkptfsMount, require_fuse

# A process that takes a write lock on bytes 0..99 of a file, says "locked", waits for a line
# on stdin, releases the lock, says "unlocked", and waits for stdin to close.
HOLDER = r"""
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 100, 0))
print("locked", flush=True)
sys.stdin.readline()
fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_UNLCK, 0, 0, 100, 0))
print("unlocked", flush=True)
sys.stdin.read()
"""


def flock_struct(kind, start=0, length=100):
    # struct flock on x86_64/aarch64 Linux: short l_type, short l_whence, off_t l_start,
    # off_t l_len, pid_t l_pid.
    return struct.pack("hhqqi", kind, 0, start, length, 0)


class LockTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def test_setlk_between_processes(self):
        with CkptfsMount() as m:
            path = m.path("locked")
            with open(path, "wb") as f:
                f.write(b"x" * 200)
            holder = subprocess.Popen([sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(holder.stdout.readline().strip(), "locked")
                fd = os.open(path, os.O_RDWR)
                try:
                    with self.assertRaises(OSError) as cm:
                        fcntl.fcntl(fd, fcntl.F_SETLK, flock_struct(fcntl.F_WRLCK))
                    self.assertIn(cm.exception.errno, (errno.EAGAIN, errno.EACCES))
                    with self.assertRaises(OSError) as cm:
                        fcntl.fcntl(fd, fcntl.F_SETLK, flock_struct(fcntl.F_RDLCK, 50, 10))
                    self.assertIn(cm.exception.errno, (errno.EAGAIN, errno.EACCES))
                    # F_GETLK names the holder.
                    got = fcntl.fcntl(fd, fcntl.F_GETLK, flock_struct(fcntl.F_WRLCK))
                    kind, _, _, _, pid = struct.unpack("hhqqi", got)
                    self.assertEqual(kind, fcntl.F_WRLCK)
                    self.assertEqual(pid, holder.pid)
                    # A range the holder does not cover is free.
                    fcntl.fcntl(fd, fcntl.F_SETLK, flock_struct(fcntl.F_WRLCK, 150, 10))
                    holder.stdin.write("release\n")
                    holder.stdin.flush()
                    self.assertEqual(holder.stdout.readline().strip(), "unlocked")
                    fcntl.fcntl(fd, fcntl.F_SETLK, flock_struct(fcntl.F_WRLCK))
                    fcntl.fcntl(fd, fcntl.F_SETLK, flock_struct(fcntl.F_UNLCK))
                finally:
                    os.close(fd)
            finally:
                holder.stdin.close()
                holder.wait(timeout=10)
                holder.stdout.close()
            self.assertEqual(m.unmount(), 0)

    def test_flock_between_processes(self):
        code = ("import fcntl, sys; f = open(sys.argv[1], 'rb'); fcntl.flock(f, fcntl.LOCK_EX); "
                "print('locked', flush=True); sys.stdin.readline()")
        with CkptfsMount() as m:
            path = m.path("flocked")
            open(path, "wb").close()
            holder = subprocess.Popen([sys.executable, "-c", code, path], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(holder.stdout.readline().strip(), "locked")
                with open(path, "rb") as f:
                    with self.assertRaises(BlockingIOError):
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    holder.stdin.write("done\n")
                    holder.stdin.flush()
                    holder.wait(timeout=10)
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                holder.stdin.close()
                holder.wait(timeout=10)
                holder.stdout.close()
            self.assertEqual(m.unmount(), 0)


if __name__ == "__main__":
    unittest.main()
