"""Files open at long paths when the worker is replaced (core/recovery/kernel_state_record.h keeps each
node the kernel holds by its directory and name): six directories of 200-byte names, and a tree
deeper than PATH_MAX reached with openat, go on after the worker is killed (the default options)
and after an upgrade (the cache shared and private), and what they held is rescued by the next
mount when the whole daemon dies."""

import errno
import glob
import os
import resource
import signal
import unittest

from ckptfs_testing.harness import CkptfsMount, cache_memory_files, require_fuse, wait_for

CRASH = r"worker \d+ died"
# 6 x 200 bytes and a file name: 1,215 bytes from the root (the case).
SIX = [c * 200 for c in "abcdef"]
# 25 x 200 bytes: 5,024 bytes from the root before the file name, past PATH_MAX (4,096).
DEEP = [f"{i:03d}" + "x" * 197 for i in range(25)]


def make_dirs(top, names):
    """Makes `names` under the directory descriptor `top`, one below the other, with mkdirat;
    returns a descriptor of the deepest."""
    fd = os.dup(top)
    for name in names:
        os.mkdir(name, dir_fd=fd)
        below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    return fd


def read_at(root, names):
    """The bytes of the file at `names` under `root`, opened one name at a time (openat)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names[:-1]:
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        with open(os.open(names[-1], os.O_RDONLY, dir_fd=fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


# Descriptors one process holds for the full-record test (RLIMIT_NOFILE is 20,000 here, and
# raising it needs CAP_SYS_RESOURCE): more are held by children.
HELD_PER_PROCESS = 15000


def hold_in_a_child(fds):
    """Forks a child that holds the descriptors {name number: fd} (open files of the mount)
    until told "w": then it appends " and after" to those it was given with a number divisible
    by 1000, answers "ok" (or the error), and exits, closing them. Returns (pid, to, back)."""
    from_parent, to_child = os.pipe()
    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:
        # Whatever happens, the child ends here: it must never run the rest of the test.
        answer = b"ok"
        try:
            os.close(to_child)
            os.close(from_child)
            os.read(from_parent, 1)
            for n, fd in fds.items():
                if n % 1000 == 0 and os.write(fd, b" and after") != 10:
                    answer = f"short write to f{n}".encode()
        except BaseException as e:
            answer = repr(e).encode()
        finally:
            try:
                os.write(to_parent, answer)
            finally:
                os._exit(0)
    os.close(from_parent)
    os.close(to_parent)
    return pid, to_child, from_child


def kill_worker(m):
    old = m.worker_pid()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: m.worker_pid() != old, 30, lambda: "a new worker")


def upgrade(m):
    # Asked from this process: a child's exec would close (and so seal) the open files.
    before = m.stats()["worker"]["number"]
    with open(m.path(".ckptfs", "upgrade"), "w") as f:
        f.write("upgrade")
    wait_for(lambda: m.stats()["worker"]["number"] == before + 1, 60,
             lambda: m.stats()["worker"])


class LongPathTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def test_files_open_at_long_paths_go_on_after_the_worker_is_killed(self):
        def kill_and_count(m):
            kill_worker(m)
            self.assertEqual(m.stats()["recovered_handles"], 3, "every open file, by its handle")

        with CkptfsMount(expect_errors=[CRASH]) as m:
            self.open_replace_and_go_on(m, kill_and_count)

    def test_files_open_at_long_paths_go_on_after_an_upgrade(self):
        for memory in ("shared", "private"):
            with self.subTest(cache_memory=memory), CkptfsMount([f"cache_memory={memory}"]) as m:
                self.open_replace_and_go_on(m, upgrade)

    def test_files_open_at_long_paths_are_rescued_by_the_next_mount_after_the_daemon_dies(self):
        # A small cache: its memory file must find room in /dev/shm, which other mounts share.
        with CkptfsMount(["cache_size=64M"]) as m:
            fds = []
            try:
                fds.append(os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY))
                fds.append(make_dirs(fds[0], SIX))
                fds.append(os.open("model.pt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1]))
                os.write(fds[-1], b"a" * 300000)
                fds.append(make_dirs(fds[0], DEEP))
                fds.append(os.open("shard.distcp", os.O_WRONLY | os.O_CREAT, 0o640,
                                   dir_fd=fds[-1]))
                os.write(fds[-1], b"s" * 200000)
                self.assertEqual(len(cache_memory_files(m.backing)), 1, "a file, not a memfd")
                m.kill9()  # The supervisor and its worker: the next mount recovers.
            finally:
                for fd in fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass  # The mount went with its daemon.
            with CkptfsMount(backing=m.backing) as again:
                rescued = glob.glob(m.bpath(".ckptfs", "rescue-*"))
                self.assertEqual(len(rescued), 1, os.listdir(m.bpath(".ckptfs")))
                self.assertEqual(read_at(rescued[0], SIX + ["model.pt"]), b"a" * 300000)
                self.assertEqual(read_at(rescued[0], DEEP + ["shard.distcp"]), b"s" * 200000)
                self.assertEqual(again.unmount(), 0)

    def test_a_full_record_refuses_the_next_open_and_every_open_file_goes_on_after_a_kill(self):
        with CkptfsMount(expect_errors=[CRASH]) as m:
            os.mkdir(m.path("ckpt"))
            holders = []  # Children holding earlier descriptors: (pid, to, back).
            fds = {}  # Name number -> descriptor, of this process.
            sample = []  # Name numbers written before and after the kill.
            try:
                refused = None
                opened = 0
                while refused is None and opened < 65536:
                    try:
                        fd = os.open(m.path("ckpt", f"f{opened}"), os.O_WRONLY | os.O_CREAT, 0o644)
                    except OSError as e:
                        refused = e
                        break
                    fds[opened] = fd
                    if opened % 1000 == 0:
                        os.write(fd, b"before")
                        sample.append(opened)
                    opened += 1
                    if len(fds) == HELD_PER_PROCESS:
                        holders.append(hold_in_a_child(fds))
                        for fd in fds.values():
                            os.close(fd)
                        fds = {}
                self.assertIsNotNone(refused, "the record took 65,536 open files")
                self.assertEqual(refused.errno, errno.ENFILE, refused)
                self.assertGreaterEqual(opened, 30000)
                self.assertGreaterEqual(m.stats()["kernel_record_refused"], 1)

                kill_worker(m)
                self.assertEqual(m.stats()["recovered_handles"], opened, "every open file")
                for n in sample:
                    if n in fds:
                        self.assertEqual(os.write(fds[n], b" and after"), 10, n)
                for pid, to, back in holders:
                    os.write(to, b"w")
                    self.assertEqual(os.read(back, 100), b"ok", f"the child holding files: {pid}")
                    self.assertEqual(os.waitpid(pid, 0)[1], 0)
                holders = []
                for fd in fds.values():
                    os.close(fd)
                fds = {}
                # A close returns before the kernel's RELEASE reaches the daemon: the room comes
                # once the releases are in.
                wait_for(lambda: _opens(m.path("ckpt", "room again")), timeout=30,
                         what=lambda: "an open after every file was closed")
                with open(m.path("ckpt", "room again"), "w") as f:
                    f.write("closed files made room")
            finally:
                for fd in fds.values():
                    os.close(fd)
                for pid, to, back in holders:
                    os.kill(pid, signal.SIGKILL)  # Only the children this test started.
                    os.waitpid(pid, 0)
            m.sync()
            for n in sample:
                with open(m.bpath("ckpt", f"f{n}"), "rb") as f:
                    self.assertEqual(f.read(), b"before and after", n)
            self.assertEqual(m.unmount(), 0)

    def open_replace_and_go_on(self, m, replace):
        """Opens a file for writing and one for reading six directories deep, and one for
        writing (fsynced) past PATH_MAX; replace(m) replaces the worker; every descriptor goes
        on, and so does the kernel's node of the deepest directory; all of it reaches the
        backing store."""
        fds = []

        def keep(fd):
            fds.append(fd)
            return fd

        try:
            root = keep(os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY))
            six = keep(make_dirs(root, SIX))
            with open(os.open("done.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=six), "wb") as f:
                f.write(b"d" * 100000)
            writing = keep(os.open("model.pt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=six))
            os.write(writing, b"a" * 300000)
            reading = keep(os.open("done.bin", os.O_RDONLY, dir_fd=six))
            self.assertEqual(os.read(reading, 1000), b"d" * 1000)
            deep = keep(make_dirs(root, DEEP))
            shard = keep(os.open("shard.distcp", os.O_WRONLY | os.O_CREAT, 0o640, dir_fd=deep))
            os.write(shard, b"s" * 200000)
            os.fsync(shard)

            replace(m)

            self.assertEqual(os.write(writing, b"b" * 1000), 1000)
            self.assertEqual(os.read(reading, 200000), b"d" * 99000)
            self.assertEqual(os.write(shard, b"more"), 4)
            os.fsync(shard)
            with open(os.open("after", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=deep), "wb") as f:
                f.write(b"made in the deep directory after")
            for fd in (writing, reading, shard):
                fds.remove(fd)
                os.close(fd)
            m.sync()
            self.assertEqual(read_at(m.backing, SIX + ["model.pt"]), b"a" * 300000 + b"b" * 1000)
            self.assertEqual(read_at(m.backing, SIX + ["done.bin"]), b"d" * 100000)
            self.assertEqual(read_at(m.backing, DEEP + ["shard.distcp"]), b"s" * 200000 + b"more")
            self.assertEqual(read_at(m.backing, DEEP + ["after"]),
                             b"made in the deep directory after")
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass  # A descriptor the failure left bad: the failure is reported.
        self.assertEqual(m.unmount(), 0)



def _opens(path):
    """Whether `path` can be opened for writing now (ENFILE: not yet)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        return True
    except OSError as e:
        if e.errno != errno.ENFILE:
            raise
        return False


if __name__ == "__main__":
    unittest.main()
