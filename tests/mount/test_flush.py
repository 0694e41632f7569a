"""Flush behaviour: coalescing (test 3), fsync semantics (test 4), close order (test 5)."""

import os
import signal
import subprocess
import threading
import time
import unittest

from crash_writer import write_file
from ckptfs_testing.harness import CkptfsMount, require_fuse
from inotify_watch import IN_CREATE, IN_MOVED_TO, Watcher


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def content(name, size):
    """Distinct, recognisable bytes for `name`."""
    head = f"<{name}>".encode()
    return (head * (size // len(head) + 1))[:size]


def published(watcher, names):
    """The names (from `names`) in the order they appeared in the watched directories."""
    out = []
    for d, name, mask in watcher.drain(0.2):
        if mask & (IN_MOVED_TO | IN_CREATE) and name in names:
            out.append(name)
    return out


class CoalescingTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def test_staged_files_never_reach_backing(self):
        """Created-then-deleted, renamed-over and 50-times-rewritten files are flushed once or
        never."""
        with CkptfsMount(options=["flush_delay=5s"]) as m:
            watcher = Watcher()
            self.addCleanup(watcher.close)
            watcher.watch(m.backing)
            before = m.stats()
            t0 = time.monotonic()
            write_file(m.path("tmp"), content("tmp", 300_000))
            os.unlink(m.path("tmp"))
            write_file(m.path("x"), content("x-old", 200_000))
            write_file(m.path("y"), content("x-new", 100_000))
            os.rename(m.path("y"), m.path("x"))
            for i in range(50):
                write_file(m.path("chunk"), content(f"chunk v{i}", 64 << 10))
            elapsed = time.monotonic() - t0
            self.assertLess(elapsed, 4.0, "the test was too slow to stay within flush_delay")
            # Still staged: nothing of it is in BACKING yet.
            self.assertEqual(sorted(n for n in os.listdir(m.backing) if n != ".ckptfs"), [])
            m.sync()
            after = m.stats()
            self.assertEqual(read_file(m.bpath("x")), content("x-new", 100_000))
            self.assertEqual(read_file(m.bpath("chunk")), content("chunk v49", 64 << 10))
            self.assertEqual(sorted(n for n in os.listdir(m.backing) if n != ".ckptfs"),
                             ["chunk", "x"])
            seen = [name for _, name, _ in watcher.drain(0.2)]
            self.assertNotIn("tmp", seen, "a deleted staged file reached BACKING")
            # y may be published under its first name and then renamed (journal replay), but
            # x's first version must never be written.
            self.assertEqual(seen.count("x"), 1, f"x published {seen.count('x')} times: {seen}")
            self.assertEqual(seen.count("chunk"), 1, f"chunk published {seen.count('chunk')} times")
            self.assertEqual(after["files_flushed"] - before["files_flushed"], 2,
                             f"published: {seen}, stats before: {before}, after: {after}")
            # tmp (1) + x's first version (1) + 49 superseded chunk versions.
            self.assertEqual(after["versions_skipped"] - before["versions_skipped"], 51,
                             f"published: {seen}, stats before: {before}, after: {after}")
            self.assertEqual(after["dirty_bytes"], 0)
            self.assertEqual(after["pending_entries"], 0)
            self.assertEqual(m.unmount(), 0)


REWRITES = 1000


class WholeVersionsTest(unittest.TestCase):
    """Only versions that a writer closed (or fsynced) may reach BACKING under a final name."""

    def setUp(self):
        require_fuse()

    def test_rewrite_in_place_publishes_only_whole_versions(self):
        """A tracker rewritten in place (open O_TRUNC, write, close) many times with flush_delay=0:
        every state of BACKING/meta seen by a concurrent reader is one of the closed versions,
        never an empty or partial one."""
        with CkptfsMount(options=["flush_delay=0"]) as m:
            versions = [content(f"v{i}", 64 << 10) for i in range(REWRITES)]
            valid = set(versions)
            bad, reads, stop = [], [0], threading.Event()

            def poll():
                while not stop.is_set():
                    try:
                        with open(m.bpath("meta"), "rb") as f:
                            data = f.read()
                    except FileNotFoundError:
                        continue
                    reads[0] += 1
                    if data not in valid:
                        bad.append(len(data))

            t = threading.Thread(target=poll)
            t.start()
            before = m.stats()
            try:
                for v in versions:
                    write_file(m.path("meta"), v)
                m.sync()
            finally:
                stop.set()
                t.join()
            after = m.stats()
            if bad:
                self.fail(f"BACKING/meta held {len(bad)} times a version that was never closed "
                          f"(sizes {sorted(set(bad))}) in {reads[0]} reads")
            sealed = (after["files_flushed"] - before["files_flushed"]
                      + after["versions_skipped"] - before["versions_skipped"])
            self.assertEqual(sealed, REWRITES,
                             f"{REWRITES} closes sealed {sealed} versions: {after}")
            with open(m.bpath("meta"), "rb") as f:
                self.assertTrue(f.read() == versions[-1])
            self.assertEqual(m.unmount(), 0)

    def test_reader_close_does_not_publish_a_file_being_written(self):
        """A reader (cat, du, a monitor) opening and closing a file that a writer still has
        open must not publish the writer's half-written content."""
        with CkptfsMount(options=["flush_delay=0"]) as m:
            fd = os.open(m.path("shard"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.write(fd, b"A" * 100_000)
                with open(m.path("shard"), "rb") as reader:
                    reader.read(10)
                time.sleep(1.0)
                self.assertFalse(os.path.exists(m.bpath("shard")),
                                 "half-written file published under its final name after a "
                                 "reader's close (a crash now leaves a torn shard)")
                os.write(fd, b"B" * 100_000)
            finally:
                os.close(fd)
            m.sync()
            with open(m.bpath("shard"), "rb") as f:
                self.assertTrue(f.read() == b"A" * 100_000 + b"B" * 100_000)
            self.assertEqual(m.unmount(), 0)


    def test_a_forked_child_that_exits_or_execs_does_not_publish_the_parents_half_written_file(self):
        """The kernel flushes the parent's open file when a forked child exits (DataLoader
        workers, multiprocessing) or closes what it inherited before its exec (subprocess): the
        good checkpoint under the name must stay until the parent itself closes."""
        with CkptfsMount() as m:
            good, new = content("GOOD", 8 << 20), content("NEW", 16 << 20)
            write_file(m.path("last.pt"), good)
            m.sync()
            with open(m.path("last.pt"), "wb") as f:
                f.write(new[:8 << 20])
                f.flush()
                child = os.fork()
                if child == 0:
                    os._exit(0)
                os.waitpid(child, 0)
                subprocess.run(["true"], check=True)  # close_fds, then exec.
                time.sleep(2.0)  # Many times the default flush_delay.
                m.sync()
                self.assertTrue(read_file(m.bpath("last.pt")) == good,
                                "a child's exit published the half-written checkpoint")
                f.write(new[8 << 20:])
            m.sync()
            self.assertTrue(read_file(m.bpath("last.pt")) == new)
            self.assertEqual(m.unmount(), 0)


class FsyncTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def test_fsync_wait_makes_file_durable(self):
        with CkptfsMount(options=["flush_delay=60s", "fsync=wait"]) as m:
            a, b = content("A", 150_000), content("B", 1 << 20)
            write_file(m.path("a"), a)  # Closed before b's fsync: must be durable with it.
            fd = os.open(m.path("b"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.write(fd, b)
                self.assertFalse(os.path.exists(m.bpath("b")))
                os.fsync(fd)
                self.assertEqual(read_file(m.bpath("b")), b, "fsync returned before b was durable")
                self.assertEqual(read_file(m.bpath("a")), a,
                                 "fsync returned before a file closed earlier was durable")
                # fdatasync after a further write makes the new bytes durable too.
                os.pwrite(fd, b"NEW", 10)
                os.fdatasync(fd)
                self.assertEqual(read_file(m.bpath("b"))[:16], b[:10] + b"NEW" + b[13:16])
            finally:
                os.close(fd)
            self.assertEqual(m.unmount(), 0)

    def test_fsync_defer_acknowledges_at_once(self):
        with CkptfsMount(options=["flush_delay=60s", "fsync=defer"]) as m:
            c = content("C", 4 << 20)
            fd = os.open(m.path("c"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.write(fd, c)
                t0 = time.monotonic()
                os.fsync(fd)
                took = time.monotonic() - t0
            finally:
                os.close(fd)
            self.assertLess(took, 2.0)
            self.assertFalse(os.path.exists(m.bpath("c")),
                             "fsync=defer flushed at once although flush_delay=60s")
            m.sync()
            self.assertEqual(read_file(m.bpath("c")), c)
            self.assertEqual(m.unmount(), 0)


class UnmountTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def check_end(self, stop):
        with CkptfsMount(options=["flush_delay=60s"]) as m:
            files = {f"f{i}": content(f"f{i}", 300_000 + i) for i in range(20)}
            for name, data in files.items():
                write_file(m.path(name), data)
            os.mkdir(m.path("dir"))
            write_file(m.path("dir", "last"), b"last")
            self.assertFalse(os.path.exists(m.bpath("f0")))
            code = stop(m)
            self.assertEqual(code, 0, "the daemon did not exit 0 after flushing:\n"
                             + m.output()[-2000:])
            self.assertFalse(os.path.ismount(m.mnt))
            for name, data in files.items():
                self.assertTrue(read_file(m.bpath(name)) == data, name)
            self.assertEqual(read_file(m.bpath("dir", "last")), b"last")
            self.assertEqual(m.staging_files(), [])

    def test_fusermount_flushes_everything(self):
        self.check_end(lambda m: m.unmount())

    def test_sigterm_flushes_everything(self):
        def stop(m):
            os.kill(m.proc.pid, signal.SIGTERM)  # The daemon this harness started.
            return m.wait_exit()
        self.check_end(stop)


class CloseOrderTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def test_published_in_close_order(self):
        """Files opened in one order and closed in another are published in close order."""
        with CkptfsMount(options=["flush_delay=60s"]) as m:
            watcher = Watcher()
            self.addCleanup(watcher.close)
            watcher.watch(m.backing)
            names = [f"file{c}" for c in "ABCDEFGH"]
            fds = {}
            for n in names:  # Open and write in name order...
                fds[n] = os.open(m.path(n), os.O_WRONLY | os.O_CREAT, 0o644)
                os.write(fds[n], content(n, 100_000))
            close_order = ["fileE", "fileB", "fileH", "fileA", "fileG", "fileC", "fileF", "fileD"]
            for n in close_order:  # ...close in another.
                os.close(fds[n])
            m.sync()
            self.assertEqual(published(watcher, set(names)), close_order)
            for n in names:
                self.assertEqual(read_file(m.bpath(n)), content(n, 100_000))
            self.assertEqual(m.unmount(), 0)

    def check_tracker(self, flush_delay):
        with CkptfsMount(options=[f"flush_delay={flush_delay}"]) as m:
            os.mkdir(m.path("iter_0000100"))
            m.sync()
            watcher = Watcher()
            self.addCleanup(watcher.close)
            watcher.watch(m.backing)
            watcher.watch(m.bpath("iter_0000100"))
            data = [f"__{i}_0.distcp" for i in range(40)]
            for i, n in enumerate(data):
                write_file(m.path("iter_0000100", n), content(n, 64 << 10 if i % 3 else 700_000))
            write_file(m.path("iter_0000100", ".metadata"), content("metadata", 5000))
            write_file(m.path("latest_checkpointed_iteration.txt"), b"100")
            m.sync()
            order = published(watcher, set(data) | {".metadata", "latest_checkpointed_iteration.txt"})
            self.assertEqual(order, data + [".metadata", "latest_checkpointed_iteration.txt"])
            self.assertEqual(read_file(m.bpath("latest_checkpointed_iteration.txt")), b"100")
            self.assertEqual(m.unmount(), 0)

    def test_tracker_last_with_delay(self):
        self.check_tracker("60s")

    def test_tracker_last_without_delay(self):
        self.check_tracker("0")


if __name__ == "__main__":
    unittest.main()
