"""Namespace and data operations: the mount must behave like a plain directory, and after
`ckptfs sync` and after unmount the backing directory must hold exactly that tree."""

import ctypes
import errno
import os
import shutil
import socket
import stat
import tempfile
import time
import unittest

from ckptfs_testing.harness import (CkptfsMount, describe_tree_diff, require_fuse, snapshot)

AT_FDCWD = -100
RENAME_NOREPLACE = 1
_libc = ctypes.CDLL(None, use_errno=True)


def renameat2(old, new, flags):
    if _libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old)


def populate_existing(root):
    """What BACKING (and the plain reference dir) hold before the mount starts."""
    os.makedirs(os.path.join(root, "old", "sub"))
    with open(os.path.join(root, "old", "a.bin"), "wb") as f:
        f.write(bytes(range(256)) * 300)
    with open(os.path.join(root, "old", "sub", "keep.txt"), "wb") as f:
        f.write(b"kept as is\n")
    with open(os.path.join(root, "old", "modify.txt"), "wb") as f:
        f.write(b"0123456789" * 10)
    with open(os.path.join(root, "old", "gone.txt"), "wb") as f:
        f.write(b"to be deleted")
    with open(os.path.join(root, "old", "moveme.txt"), "wb") as f:
        f.write(b"to be renamed")
    os.chmod(os.path.join(root, "old", "a.bin"), 0o640)
    os.symlink("a.bin", os.path.join(root, "old", "link"))
    with open(os.path.join(root, "old", "hl1"), "wb") as f:
        f.write(b"hard-linked before the mount")
    os.link(os.path.join(root, "old", "hl1"), os.path.join(root, "old", "hl2"))
    os.mkfifo(os.path.join(root, "old", "fifo"), 0o640)
    os.mknod(os.path.join(root, "old", "sock"), stat.S_IFSOCK | 0o600)
    if os.geteuid() == 0:
        os.mknod(os.path.join(root, "old", "null"), stat.S_IFCHR | 0o600, os.makedev(1, 3))


class Recorder:
    """Runs operations and records what they return or the errno they fail with."""

    def __init__(self, root):
        self.root = root
        self.log = []

    def p(self, rel):
        return os.path.join(self.root, rel)

    def do(self, label, fn, *args, **kwargs):
        try:
            value = fn(*args, **kwargs)
        except OSError as e:
            value = "error " + errno.errorcode.get(e.errno, str(e.errno))
        self.log.append((label, value))
        return value


def op_sequence(root):
    """The operations of test 1; returns the recorded observations."""
    r = Recorder(root)
    p = r.p

    def write(rel, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode=0o644):
        fd = os.open(p(rel), flags, mode)
        try:
            return os.write(fd, data)
        finally:
            os.close(fd)

    def pwrite(rel, data, offset):
        fd = os.open(p(rel), os.O_WRONLY)
        try:
            return os.pwrite(fd, data, offset)
        finally:
            os.close(fd)

    def read(rel):
        with open(p(rel), "rb") as f:
            return f.read()

    def pread(rel, n, off):
        fd = os.open(p(rel), os.O_RDONLY)
        try:
            return os.pread(fd, n, off)
        finally:
            os.close(fd)

    def size(rel):
        return os.stat(p(rel)).st_size

    def mode(rel):
        return oct(stat.S_IMODE(os.stat(p(rel)).st_mode))

    def nlink(rel):
        return os.stat(p(rel)).st_nlink

    def ls(rel=""):
        return sorted(os.listdir(p(rel)))

    def describe(rel):
        st = os.lstat(p(rel))
        return (stat.S_IFMT(st.st_mode), oct(stat.S_IMODE(st.st_mode)), st.st_size, st.st_nlink,
                st.st_rdev)

    def fifo_round_trip(rel):
        reader = os.open(p(rel), os.O_RDONLY | os.O_NONBLOCK)
        writer = os.open(p(rel), os.O_WRONLY)
        try:
            os.write(writer, b"through the pipe")
            return os.read(reader, 100)
        finally:
            os.close(writer)
            os.close(reader)

    def socket_round_trip(rel):
        with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as client:
            server.bind(p(rel))
            server.listen(1)
            client.connect(p(rel))
            conn, _ = server.accept()
            with conn:
                client.sendall(b"through the socket")
                return conn.recv(100)

    def ctime_changed_by_rename_over_other_link():
        write("d/c1", b"linked")
        os.link(p("d/c1"), p("d/c2"))
        write("d/c3", b"renamed over")
        before = os.stat(p("d/c2")).st_ctime_ns
        time.sleep(0.05)
        os.rename(p("d/c3"), p("d/c1"))
        return os.stat(p("d/c2")).st_ctime_ns > before

    def read_write_same_fd(rel):
        fd = os.open(p(rel), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"hello world")
            os.lseek(fd, 0, os.SEEK_SET)
            first = os.read(fd, 5)
            os.pwrite(fd, b"W", 6)
            return first + os.pread(fd, 100, 0)
        finally:
            os.close(fd)

    # Create, write, read.
    r.do("mkdir d", os.mkdir, p("d"))
    r.do("write d/f1", write, "d/f1", b"first file\n")
    r.do("read d/f1", read, "d/f1")
    r.do("rw same fd", read_write_same_fd, "d/rw")
    # pwrite at offsets with holes.
    r.do("create holes", write, "d/holes", b"")
    r.do("pwrite 1M", pwrite, "d/holes", b"X" * 1000, 1 << 20)
    r.do("pwrite 5000", pwrite, "d/holes", b"Y" * 10, 5000)
    r.do("pwrite 3M+17", pwrite, "d/holes", b"tail", (3 << 20) + 17)
    r.do("size holes", size, "d/holes")
    r.do("pread hole", pread, "d/holes", 64, 4990)
    r.do("pread across", pread, "d/holes", 2000, (1 << 20) - 500)
    # Append.
    r.do("append 1", write, "d/log", b"line1\n", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    r.do("append 2", write, "d/log", b"line2\n", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    r.do("append 3", write, "d/log", b"line3\n", os.O_WRONLY | os.O_APPEND)
    r.do("read log", read, "d/log")
    # O_TRUNC and O_EXCL.
    r.do("write trunc", write, "d/t", b"a long first content")
    r.do("rewrite trunc", write, "d/t", b"short")
    r.do("read trunc", read, "d/t")
    r.do("excl new", write, "d/excl", b"x", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    r.do("excl exists", write, "d/excl", b"y", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    r.do("open missing", read, "d/nope")
    # truncate up and down.
    r.do("write tr", write, "d/tr", b"abcdefghij" * 100)
    r.do("truncate down", os.truncate, p("d/tr"), 15)
    r.do("read tr down", read, "d/tr")
    r.do("truncate up", os.truncate, p("d/tr"), 70000)
    r.do("read tr up", read, "d/tr")
    r.do("ftruncate", lambda: (lambda fd: (os.ftruncate(fd, 3), os.close(fd)))(
        os.open(p("d/tr2"), os.O_RDWR | os.O_CREAT, 0o644)))
    r.do("size tr2", size, "d/tr2")
    # Rename: plain, over an existing file, NOREPLACE, into another directory.
    r.do("write r1", write, "d/r1", b"r1 data")
    r.do("write r2", write, "d/r2", b"r2 data, longer")
    r.do("rename r1 r1b", os.rename, p("d/r1"), p("d/r1b"))
    r.do("rename r2 over r1b", os.rename, p("d/r2"), p("d/r1b"))
    r.do("read r1b", read, "d/r1b")
    r.do("write r3", write, "d/r3", b"r3")
    r.do("noreplace exists", renameat2, p("d/r3"), p("d/r1b"), RENAME_NOREPLACE)
    r.do("noreplace new", renameat2, p("d/r3"), p("d/r4"), RENAME_NOREPLACE)
    r.do("mkdir e", os.mkdir, p("e"))
    r.do("rename into e", os.rename, p("d/r4"), p("e/r4"))
    r.do("rename missing", os.rename, p("d/missing"), p("d/x"))
    r.do("mkdir d/sub", os.mkdir, p("d/sub"))
    r.do("write d/sub/x", write, "d/sub/x", b"in sub")
    r.do("rename dir", os.rename, p("d/sub"), p("e/sub2"))
    r.do("read moved", read, "e/sub2/x")
    # Unlink, mkdir/rmdir.
    r.do("unlink", os.unlink, p("d/t"))
    r.do("unlink missing", os.unlink, p("d/t"))
    r.do("rmdir notempty", os.rmdir, p("e"))
    r.do("mkdir exists", os.mkdir, p("e"))
    r.do("mkdir empty", os.mkdir, p("empty"))
    r.do("mkdir gone", os.mkdir, p("gone"))
    r.do("rmdir gone", os.rmdir, p("gone"))
    r.do("rmdir file", os.rmdir, p("d/f1"))
    r.do("unlink dir", os.unlink, p("empty"))
    # Symlinks.
    r.do("symlink", os.symlink, "f1", p("d/sl"))
    r.do("readlink", os.readlink, p("d/sl"))
    r.do("read via symlink", read, "d/sl")
    r.do("dangling symlink", os.symlink, "../nowhere", p("d/dangling"))
    r.do("readlink dangling", os.readlink, p("d/dangling"))
    # Hard links.
    r.do("write h", write, "d/h", b"hard")
    r.do("link", os.link, p("d/h"), p("e/h2"))
    r.do("nlink after link", nlink, "d/h")
    r.do("write via link", pwrite, "e/h2", b"HARD", 0)
    r.do("read other name", read, "d/h")
    r.do("link", os.link, p("d/h"), p("d/h3"))
    r.do("unlink one", os.unlink, p("d/h3"))
    r.do("nlink after unlink", nlink, "e/h2")
    r.do("ctime of a link renamed over", ctime_changed_by_rename_over_other_link)
    # chmod, utime.
    r.do("chmod", os.chmod, p("d/f1"), 0o600)
    r.do("mode", mode, "d/f1")
    r.do("chmod dir", os.chmod, p("e"), 0o750)
    r.do("utime", os.utime, p("d/f1"), ns=(1_000_000_000_123_456_789, 1_500_000_000_987_654_321))
    r.do("mtime", lambda: os.stat(p("d/f1")).st_mtime_ns)
    r.do("atime", lambda: os.stat(p("d/f1")).st_atime_ns)
    r.do("create mode 0640", write, "d/m640", b"m", os.O_WRONLY | os.O_CREAT, 0o640)
    r.do("mode m640", mode, "d/m640")
    # FIFOs, sockets, device nodes.
    r.do("mkfifo", os.mkfifo, p("d/fifo"), 0o640)
    r.do("mkfifo exists", os.mkfifo, p("d/fifo"))
    r.do("describe fifo", describe, "d/fifo")
    r.do("fifo round trip", fifo_round_trip, "d/fifo")
    r.do("mknod socket", os.mknod, p("d/sock"), stat.S_IFSOCK | 0o600)
    r.do("mknod file", os.mknod, p("d/mknod-file"), stat.S_IFREG | 0o644)
    r.do("describe mknod file", describe, "d/mknod-file")
    r.do("bound socket", socket_round_trip, "d/bound")
    r.do("describe bound socket", describe, "d/bound")
    if os.geteuid() == 0:
        r.do("mknod device", os.mknod, p("d/null"), stat.S_IFCHR | 0o600, os.makedev(1, 3))
        r.do("describe device", describe, "d/null")
    r.do("rename fifo", os.rename, p("d/fifo"), p("e/fifo"))
    r.do("link fifo", os.link, p("e/fifo"), p("d/fifo-link"))
    r.do("chmod fifo", os.chmod, p("e/fifo"), 0o600)
    r.do("describe fifo link", describe, "d/fifo-link")
    r.do("truncate fifo", os.truncate, p("e/fifo"), 0)
    r.do("unlink socket", os.unlink, p("d/sock"))
    r.do("mknod brief", os.mkfifo, p("d/brief"))
    r.do("unlink brief", os.unlink, p("d/brief"))
    # Files already present in BACKING before mounting.
    r.do("ls old", ls, "old")
    r.do("read old/a.bin", read, "old/a.bin")
    r.do("mode old/a.bin", mode, "old/a.bin")
    r.do("readlink old/link", os.readlink, p("old/link"))
    r.do("read old/sub/keep", read, "old/sub/keep.txt")
    r.do("pwrite old/modify", pwrite, "old/modify.txt", b"MODIFIED", 20)
    r.do("append old/modify", write, "old/modify.txt", b"+end", os.O_WRONLY | os.O_APPEND)
    r.do("read old/modify", read, "old/modify.txt")
    r.do("unlink old/gone", os.unlink, p("old/gone.txt"))
    r.do("rename old/moveme", os.rename, p("old/moveme.txt"), p("d/moved.txt"))
    r.do("link old/a.bin", os.link, p("old/a.bin"), p("d/a-link"))
    r.do("nlink old/a.bin", nlink, "old/a.bin")
    r.do("truncate old/a.bin", os.truncate, p("old/a.bin"), 1000)
    r.do("read d/a-link", read, "d/a-link")
    r.do("nlink old/hl1", nlink, "old/hl1")
    r.do("pwrite old/hl1", pwrite, "old/hl1", b"HARD", 0)
    r.do("read old/hl2", read, "old/hl2")
    r.do("nlink old/sub", lambda: os.stat(p("old")).st_nlink)
    r.do("describe old/fifo", describe, "old/fifo")
    r.do("describe old/sock", describe, "old/sock")
    r.do("fifo round trip old/fifo", fifo_round_trip, "old/fifo")
    r.do("rename old/sock", os.rename, p("old/sock"), p("e/old-sock"))
    if os.geteuid() == 0:
        r.do("describe old/null", describe, "old/null")
    r.do("rmdir old/sub notempty", os.rmdir, p("old/sub"))
    # Listings.
    r.do("ls root", ls)
    r.do("ls d", ls, "d")
    r.do("ls e", ls, "e")
    # Names longer than NAME_MAX, in a directory made through the mount and in one listed.
    too_long = "n" * 256
    for rel in ("d/" + too_long, "old/" + too_long):
        r.do("stat too long", os.stat, p(rel))
        r.do("chmod too long", os.chmod, p(rel), 0o600)
        r.do("chown too long", os.chown, p(rel), os.getuid(), os.getgid())
        r.do("lchown too long", os.lchown, p(rel), os.getuid(), os.getgid())
        r.do("truncate too long", os.truncate, p(rel), 0)
        r.do("create too long", write, rel, b"x")
        r.do("mkdir too long", os.mkdir, p(rel))
        r.do("mkfifo too long", os.mkfifo, p(rel))
        r.do("symlink too long", os.symlink, "f1", p(rel))
        r.do("link to too long", os.link, p("d/f1"), p(rel))
        r.do("link of too long", os.link, p(rel), p("d/link-of-too-long"))
        r.do("rename to too long", os.rename, p("d/f1"), p(rel))
        r.do("rename of too long", os.rename, p(rel), p("d/renamed-too-long"))
        r.do("unlink too long", os.unlink, p(rel))
        r.do("rmdir too long", os.rmdir, p(rel))
    return r.log


class NamespaceTest(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        require_fuse()
        self.ref = tempfile.mkdtemp(prefix="ckptfs-ref-")
        self.addCleanup(shutil.rmtree, self.ref, True)
        populate_existing(self.ref)
        self.ref_log = op_sequence(self.ref)
        self.ref_tree = snapshot(self.ref, contents="bytes", with_nlink=True)

    def compare_logs(self, got):
        self.assertEqual([l for l, _ in got], [l for l, _ in self.ref_log])
        diffs = [f"  '{label}': plain dir gave {want!r:.120}, mount gave {value!r:.120}"
                 for (label, want), (_, value) in zip(self.ref_log, got) if want != value]
        if diffs:
            self.fail("operations that differ from a plain directory:\n" + "\n".join(diffs))

    def assert_tree(self, root, where):
        tree = snapshot(root, contents="bytes", with_nlink=True)
        diff = describe_tree_diff(self.ref_tree, tree, "plain dir", where)
        if diff:
            self.fail(f"{where} differs from the plain directory:\n{diff}")

    def test_ops_like_plain_dir(self):
        """Test 1: the same operations on a plain dir and on the mount give the same results."""
        with CkptfsMount(options=["flush_delay=200"]) as m:
            populate_existing(m.backing)
            log = op_sequence(m.mnt)
            with self.subTest("operation results"):
                self.compare_logs(log)
            with self.subTest("tree"):
                self.assert_tree(m.mnt, "mount")
            # The control directory is hidden from the root listing but can be used.
            self.assertNotIn(".ckptfs", os.listdir(m.mnt))
            self.assertTrue(os.path.isdir(m.path(".ckptfs")))
            self.assertEqual(sorted(os.listdir(m.path(".ckptfs"))), ["stats", "sync", "upgrade"])
            stats = m.stats()
            for key in ("dirty_bytes", "files_flushed", "versions_skipped", "bytes_written"):
                self.assertIn(key, stats)
            # statvfs describes the backing file system.
            mv, bv = os.statvfs(m.mnt), os.statvfs(m.backing)
            self.assertEqual(mv.f_frsize * mv.f_blocks, bv.f_frsize * bv.f_blocks)
            self.assertAlmostEqual(mv.f_frsize * mv.f_bavail, bv.f_frsize * bv.f_bavail,
                                   delta=512 << 20)
            self.assertGreater(mv.f_namemax, 0)
            self.assertEqual(m.unmount(), 0)

    def test_device_nodes_are_not_opened_through_the_mount(self):
        """The mount is nodev (FUSE's default): a device node is shown but not opened."""
        if os.geteuid() != 0:
            self.skipTest("needs root (CAP_MKNOD) to make device nodes")
        with CkptfsMount() as m:
            os.mknod(m.path("null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
            with self.assertRaises(PermissionError):
                open(m.path("null"), "rb")
            self.assertTrue(stat.S_ISCHR(os.lstat(m.path("null")).st_mode))
            m.sync()
            self.assertEqual(os.lstat(m.bpath("null")).st_rdev, os.makedev(1, 3))
            self.assertEqual(m.unmount(), 0)

    def test_backing_after_sync_and_unmount(self):
        """Test 2: after sync, and after unmount, BACKING holds exactly the tree, no staging."""
        with CkptfsMount(options=["flush_delay=60s"]) as m:
            populate_existing(m.backing)
            log = op_sequence(m.mnt)
            with self.subTest("operation results"):
                self.compare_logs(log)
            m.sync()
            with self.subTest("backing after sync"):
                self.assert_tree(m.backing, "backing after sync")
            self.assertEqual(m.staging_files(), [])
            self.assertEqual(os.stat(m.bpath("d", "f1")).st_mtime_ns, 1_500_000_000_987_654_321)
            # More changes after the sync reach BACKING at unmount.
            with open(m.path("d", "after-sync"), "wb") as f:
                f.write(b"late")
            os.unlink(m.path("d", "after-sync"))
            with open(m.path("e", "late"), "wb") as f:
                f.write(b"written after sync")
            self.assertEqual(m.unmount(), 0)
            self.ref_tree["e/late"] = ("f", "0o644", 18, b"written after sync", 1)
            with self.subTest("backing after unmount"):
                self.assert_tree(m.backing, "backing after unmount")
            self.assertEqual(m.staging_files(), [])
            # A new mount on the same BACKING shows the same tree.
            with CkptfsMount(backing=m.backing) as m2:
                with self.subTest("remount"):
                    self.assert_tree(m2.mnt, "remount")
                self.assertEqual(m2.unmount(), 0)


if __name__ == "__main__":
    unittest.main()
