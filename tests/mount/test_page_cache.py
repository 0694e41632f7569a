"""How the kernel serves file data: page cache, direct writes and FUSE passthrough.

A write-only open of a file no cached handle has open goes straight to the daemon (direct_io).
These tests write through such handles while readers hold cached pages, and check that every
read returns the bytes written last, as on a plain directory. With passthrough (the default for
a daemon run as root), read-only opens of large files held whole by the backing store are read
by the kernel from the backing file; the daemon sees none of those reads, and refuses writers
meanwhile. BackingReadTest turns passthrough off to test the daemon's own read path.
"""

import collections
import contextlib
import ctypes
import errno
import json
import mmap
import os
import time
import unittest

from ckptfs_testing.ckptfs_daemon import wait_for
from ckptfs_testing.harness import CkptfsMount, require_fuse, require_root
from ckptfs_testing.workloads.ranks import rank_main, run_ranks

PAGE = 4096
MiB = 1 << 20


def pread_all(fd, size):
    return os.pread(fd, size, 0)


def own_state(nbytes):
    return bytes(range(256)) * (nbytes // 256)


@rank_main
def _write_own_state(rank, start_line, path, nbytes):
    data = bytearray(own_state(nbytes))  # Built after the fork: this process's own memory.
    start_line.wait()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        for at in range(0, len(data), 8 * MiB):
            os.write(fd, view[at:at + 8 * MiB])
    finally:
        os.close(fd)


class PageCacheTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def test_reader_opened_during_a_bypassing_write_sees_each_write(self):
        with CkptfsMount() as m:
            path = m.path("f")
            writer = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.pwrite(writer, b"A" * (4 * PAGE), 0)
                reader = os.open(path, os.O_RDONLY)
                try:
                    self.assertEqual(pread_all(reader, 4 * PAGE), b"A" * (4 * PAGE))
                    # The reader's pages are cached now; each write must reach them.
                    for round_, byte in enumerate(b"BCD"):
                        os.pwrite(writer, bytes([byte]) * PAGE, PAGE)
                        want = b"A" * PAGE + bytes([byte]) * PAGE + b"A" * (2 * PAGE)
                        self.assertEqual(pread_all(reader, 4 * PAGE), want, f"round {round_}")
                finally:
                    os.close(reader)
            finally:
                os.close(writer)

    def test_pages_cached_before_an_overwrite_are_dropped_at_the_next_open(self):
        with CkptfsMount() as m:
            path = m.path("f")
            with open(path, "wb") as f:
                f.write(b"1" * (8 * PAGE))
            with open(path, "rb") as f:
                self.assertEqual(f.read(), b"1" * (8 * PAGE))  # Now in the page cache.
            # An in-place overwrite through a write-only descriptor, with no reader open.
            fd = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(fd, b"2" * PAGE, 3 * PAGE)
            finally:
                os.close(fd)
            want = b"1" * (3 * PAGE) + b"2" * PAGE + b"1" * (4 * PAGE)
            for _ in range(2):
                with open(path, "rb") as f:
                    self.assertEqual(f.read(), want)

    def test_writer_opened_while_a_reader_is_open_writes_through_the_cache(self):
        with CkptfsMount() as m:
            path = m.path("f")
            with open(path, "wb") as f:
                f.write(b"x" * (2 * PAGE))
            reader = os.open(path, os.O_RDONLY)
            try:
                self.assertEqual(pread_all(reader, 2 * PAGE), b"x" * (2 * PAGE))
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, b"y" * 100)
                finally:
                    os.close(fd)
                self.assertEqual(pread_all(reader, 3 * PAGE), b"x" * (2 * PAGE) + b"y" * 100)
            finally:
                os.close(reader)
            self.assertEqual(os.path.getsize(path), 2 * PAGE + 100)

    def test_files_report_a_preferred_io_size_of_128_kib(self):
        # Python sizes each open file's buffer by st_blksize. At 1 MiB, a loader reading 1 MiB
        # zarr chunks faulted in 256 fresh pages per chunk (glibc maps such buffers afresh).
        with CkptfsMount() as m:
            path = m.path("0.0")
            with open(path, "wb") as f:
                f.write(os.urandom(MiB))
            self.assertEqual(os.stat(path).st_blksize, 128 << 10)


@contextlib.contextmanager
def remounted(files, options=()):
    """A fresh mount over a backing store holding `files` ({name: bytes}), saved and made
    durable through an earlier mount."""
    with CkptfsMount() as m:
        for name, data in files.items():
            with open(m.path(name), "wb") as f:
                f.write(data)
        m.sync()
        m.unmount()
        with CkptfsMount(backing=m.backing, options=list(options)) as m2:
            yield m2


DAEMON_READS = ["passthrough=off"]


def daemon_bytes_read(m):
    """Bytes the daemon has read with read-like system calls (rchar: not those it spliced)."""
    with open(f"/proc/{m.proc.pid}/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def evict(path):
    """Drops the (clean) pages of `path` from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mmap.restype = ctypes.c_void_p
LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def resident(path):
    """Whether every page of `path` is in the page cache (mincore: looking does not read)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        addr = LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "mmap " + path)
        try:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if LIBC.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore " + path)
            return all(v & 1 for v in vec)
        finally:
            LIBC.munmap(addr, size)
    finally:
        os.close(fd)


class BackingReadTest(unittest.TestCase):
    """Reads of data the daemon does not hold in memory, served from the backing store by the
    daemon (passthrough off)."""

    def setUp(self):
        require_fuse()

    def test_backing_ranges_are_spliced_and_memory_ranges_copied(self):
        whole = os.urandom(3 * MiB + 123)
        patched = bytearray(os.urandom(2 * MiB))
        with remounted({"whole.pt": whole, "patched.pt": bytes(patched)}, DAEMON_READS) as m:
            # One page rewritten: its reads mix the daemon's memory with the backing file.
            with open(m.path("patched.pt"), "r+b") as f:
                f.seek(MiB + 5)
                f.write(b"new")
            patched[MiB + 5:MiB + 8] = b"new"
            read_before = daemon_bytes_read(m)
            with open(m.path("whole.pt"), "rb") as f:
                self.assertEqual(f.read(), whole)
            # Requests only: the file's bytes went from the backing file to the kernel.
            self.assertLess(daemon_bytes_read(m) - read_before, 64 << 10)
            with open(m.path("patched.pt"), "rb") as f:
                self.assertEqual(f.read(), bytes(patched))
            self.assertGreaterEqual(m.stats()["bytes_read"], len(whole) + len(patched))

    def test_large_files_on_the_backing_store_are_read_past_the_page_cache(self):
        big = os.urandom(2 * MiB + 5)
        with remounted({"big.pt": big}, DAEMON_READS) as m:
            path = m.path("big.pt")
            for _ in range(2):  # The second read is not served from the page cache.
                with open(path, "rb") as f:
                    self.assertEqual(f.read(), big)
            self.assertEqual(m.stats()["bytes_read"], 2 * len(big))
            with open(path, "rb") as reader:
                with mmap.mmap(reader.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
                    self.assertEqual(mm[MiB:MiB + PAGE], big[MiB:MiB + PAGE])
                with open(path, "r+b") as writer:  # Welcome while it is being read.
                    writer.seek(MiB)
                    writer.write(b"new")
                want = b"new" + big[MiB + 3:MiB + 5]
                self.assertEqual(os.pread(reader.fileno(), 5, MiB), want)
                with mmap.mmap(reader.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
                    self.assertEqual(mm[MiB:MiB + 5], want)

    def test_a_small_file_opened_for_reading_is_read_ahead_from_the_backing_store(self):
        small = os.urandom(512 << 10)  # Larger than the page cache fills (SmallFileRequestsTest).
        with remounted({"meta.pt": small}) as m:
            backing = m.bpath("meta.pt")
            evict(backing)
            if resident(backing):
                self.skipTest("the backing store keeps its pages (tmpfs?): nothing to read ahead")
            with open(m.path("meta.pt"), "rb") as f:  # Opened, not read yet.
                deadline = time.monotonic() + 10
                while not resident(backing) and time.monotonic() < deadline:
                    time.sleep(0.01)
                self.assertTrue(resident(backing), "the daemon did not read the file ahead")
                self.assertEqual(f.read(), small)

    def test_direct_read_off_reads_through_the_page_cache(self):
        big = os.urandom(2 * MiB)
        with remounted({"big.pt": big}, DAEMON_READS + ["direct_read=off"]) as m:
            for _ in range(2):  # The second read is served from the page cache.
                with open(m.path("big.pt"), "rb") as f:
                    self.assertEqual(f.read(), big)
            self.assertEqual(m.stats()["bytes_read"], len(big))

    def test_max_read_option_sets_the_request_size(self):
        data = os.urandom(3 * MiB)
        for max_read in ("64K", "1M"):
            with remounted({"f": data}, DAEMON_READS + ["max_read=" + max_read]) as m:
                with open(m.path("f"), "rb") as f:
                    self.assertEqual(f.read(), data, max_read)
                self.assertEqual(m.stats()["bytes_read"], len(data))

    def test_mount_raises_the_readahead(self):
        require_root()
        with CkptfsMount() as m:
            device = os.stat(m.mnt).st_dev
            knob = f"/sys/class/bdi/{os.major(device)}:{os.minor(device)}/read_ahead_kb"
            with open(knob) as f:
                self.assertEqual(int(f.read()), 4096)


def request_counts(m):
    """The FUSE requests the mount has answered, by operation (its fuse_request_seconds)."""
    return collections.Counter({op: h["counts"][-1]  # Cumulative: the last is every one.
                                for op, h in m.stats()["fuse_request_seconds"].items()})


class RequestCounter:
    """Counts the requests answered between calls of since(), less those of reading the stats
    file: each reading costs the same OPEN, IOCTL and RELEASE; its LOOKUPs (of .ckptfs and
    stats) and GETATTR come only once the kernel's entries have expired, and its READs depend on
    the text's length, so those counts may be off by two."""

    def __init__(self, m):
        self.m = m
        first = request_counts(m)
        self.last = request_counts(m)
        self.own = self.last - first

    def since(self):
        now = request_counts(self.m)
        counted = (now - self.last) - self.own
        self.last = now
        return counted


def load(paths):
    """Python's open/read/close of each path, as a loader does; the bytes read, by path."""
    out = {}
    for p in paths:
        with open(p, "rb") as f:
            out[p] = f.read()
    return out


class SmallFileRequestsTest(unittest.TestCase):
    """A small file the backing store holds durably is put whole in the kernel's page cache at its
    first read-only open, and its entry and attributes are kept long: its reads never reach the
    daemon, and a load of it again later costs only OPEN, IOCTL (Python's isatty) and RELEASE
    (no FLUSH: a reader's close is not sent)."""

    COUNT = 40

    def setUp(self):
        require_fuse()

    def files(self):
        return {f"f{i:02d}.bin": os.urandom(1000 + 997 * i) for i in range(self.COUNT)}

    def test_a_python_load_of_small_durable_files_sends_no_read_and_later_ones_no_lookup(self):
        files = self.files()
        with remounted(files) as m:
            paths = [m.path(name) for name in files]
            counter = RequestCounter(m)
            got = load(paths)
            first = counter.since()
            self.assertEqual(got, {m.path(n): data for n, data in files.items()})
            self.assertEqual(first["open"], self.COUNT, first)
            self.assertLessEqual(first["read"], 2, f"reads reached the daemon: {first}")
            self.assertEqual(first["flush"], 0, first)
            time.sleep(1.5)  # Past the short attribute timeout (kAttrTimeout).
            got = load(paths)
            again = counter.since()
            self.assertEqual(got, {m.path(n): data for n, data in files.items()})
            self.assertEqual(again["open"], self.COUNT, again)
            self.assertLessEqual(again["read"], 2, again)
            self.assertLessEqual(again["lookup"], 2, f"entries were not kept: {again}")
            self.assertLessEqual(again["getattr"], 2, f"attributes were not kept: {again}")

    def test_shared_mode_fills_no_page_cache_and_keeps_entries_briefly(self):
        files = self.files()
        with remounted(files, ["shared", "node=a"]) as m:
            paths = [m.path(name) for name in files]
            counter = RequestCounter(m)
            self.assertEqual(load(paths), {m.path(n): data for n, data in files.items()})
            first = counter.since()
            self.assertGreaterEqual(first["read"], self.COUNT, first)
            time.sleep(1.5)
            self.assertEqual(load(paths), {m.path(n): data for n, data in files.items()})
            again = counter.since()
            self.assertGreaterEqual(again["lookup"], self.COUNT, again)


class SiblingReadAheadTest(unittest.TestCase):
    """A loader that opens a directory's small durable files in name order has the next ones read
    from the device ahead of it (core/backing/sibling_read_ahead.h); opened out of order, none
    are. Under the default options."""

    COUNT = 60

    def setUp(self):
        require_fuse()

    def files(self):
        return {f"f{i:03d}.bin": os.urandom(3000 + 101 * i) for i in range(self.COUNT)}

    def cold(self, m, files):
        """Drops the backing files' pages, as after a restart."""
        for name in files:
            evict(os.path.join(m.backing, name))

    def test_files_opened_in_name_order_have_the_next_ones_read_ahead(self):
        files = self.files()
        with remounted(files) as m:
            self.cold(m, files)
            names = sorted(files)
            self.assertEqual(load([m.path(n) for n in names]),
                             {m.path(n): files[n] for n in names})
            # The first open places the loader; the second reads a window ahead; each later one
            # the next file after the window.
            wait_for(lambda: m.stats()["files_read_ahead"] == self.COUNT - 2, 20,
                     f"{self.COUNT - 2} files read ahead")

    def test_files_opened_out_of_order_have_none_read_ahead(self):
        files = self.files()
        with remounted(files) as m:
            self.cold(m, files)
            names = sorted(files, reverse=True)
            self.assertEqual(load([m.path(n) for n in names]),
                             {m.path(n): files[n] for n in names})
            self.assertEqual(load([m.path("f005.bin"), m.path("f030.bin")]),
                             {m.path("f005.bin"): files["f005.bin"],
                              m.path("f030.bin"): files["f030.bin"]})
            time.sleep(0.5)  # The read-ahead's thread acts on each open after it returned.
            self.assertEqual(m.stats()["files_read_ahead"], 0)


class SmallFileFillTest(unittest.TestCase):
    """A file whose page cache an open filled is never read stale after it changes through the
    mount."""

    def setUp(self):
        require_fuse()

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def test_a_rewrite_after_the_fill_is_read_back_before_and_after_it_is_durable(self):
        old, new = os.urandom(50000), os.urandom(7000)
        with remounted({"f": old}) as m:
            path = m.path("f")
            self.assertEqual(self.read(path), old)  # Filled.
            with open(path, "wb") as f:
                f.write(new)
            self.assertEqual(self.read(path), new)
            m.sync()  # Durable again: the next open may fill from the backing file.
            self.assertEqual(self.read(path), new)
            # In place through a write-only descriptor (past the page cache), nothing open.
            fd = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(fd, b"patch", 100)
            finally:
                os.close(fd)
            want = new[:100] + b"patch" + new[105:]
            self.assertEqual(self.read(path), want)
            m.sync()
            self.assertEqual(self.read(path), want)

    def test_a_reader_holding_the_filled_pages_sees_a_writer_s_bytes(self):
        old = os.urandom(3 * PAGE + 5)
        with remounted({"f": old}) as m:
            path = m.path("f")
            with open(path, "rb") as reader:
                self.assertEqual(reader.read(), old)
                with open(path, "r+b") as writer:
                    writer.seek(PAGE)
                    writer.write(b"new")
                self.assertEqual(os.pread(reader.fileno(), len(old), 0),
                                 old[:PAGE] + b"new" + old[PAGE + 3:])

    def test_a_truncation_after_the_fill_is_read_back(self):
        old = os.urandom(20000)
        with remounted({"f": old}) as m:
            path = m.path("f")
            self.assertEqual(self.read(path), old)
            os.truncate(path, 100)
            self.assertEqual(self.read(path), old[:100])
            os.truncate(path, 9000)
            self.assertEqual(self.read(path), old[:100] + bytes(8900))
            m.sync()
            self.assertEqual(self.read(path), old[:100] + bytes(8900))

    def test_a_rename_over_a_filled_file_shows_the_new_file_and_keeps_the_old_one_open(self):
        old, new = os.urandom(30000), os.urandom(12345)
        with remounted({"f": old, "g": new}) as m:
            self.assertEqual(self.read(m.path("f")), old)
            self.assertEqual(self.read(m.path("g")), new)
            with open(m.path("f"), "rb") as held:
                os.rename(m.path("g"), m.path("f"))
                self.assertEqual(self.read(m.path("f")), new)
                self.assertEqual(held.read(), old)
            m.sync()
            self.assertEqual(self.read(m.path("f")), new)

    def test_a_filled_file_unlinked_and_made_again_reads_the_new_bytes(self):
        old, new = os.urandom(40000), os.urandom(40000)
        with remounted({"f": old}) as m:
            path = m.path("f")
            self.assertEqual(self.read(path), old)
            os.unlink(path)
            with self.assertRaises(FileNotFoundError):
                self.read(path)
            with open(path, "wb") as f:
                f.write(new)
            self.assertEqual(self.read(path), new)
            m.sync()
            self.assertEqual(self.read(path), new)


def smaps_anon_kib(pid):
    """(Anonymous, Pss_Anon) of process `pid`, in KiB: anonymous memory it maps, and its share of
    it (half a page for a page it shares copy-on-write with one other process)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        fields = dict(line.split(":", 1) for line in f.read().splitlines()[1:])
    return int(fields["Anonymous"].split()[0]), int(fields["Pss_Anon"].split()[0])


class WriteLandingTest(unittest.TestCase):
    """The daemon reads each write request with its data landing in free blocks of its cache,
    placed where the last write ended: the file takes the blocks a sequential writer's records
    cover whole as they were read, without a copy (stats: bytes_landed)."""

    def setUp(self):
        require_fuse()

    def test_a_sequential_writers_unaligned_records_land_in_the_blocks_its_file_keeps(self):
        # Records at offsets out of line with the 16 KiB blocks, from page-aligned memory (as
        # tensors' storage is): the kernel splits each into requests of whole pages.
        sizes = (5673, 3 * MiB + 17, 100, 8 * MiB, 28 * 1024 + 3) * 4
        memory = mmap.mmap(-1, max(sizes))
        memory.write(os.urandom(max(sizes)))
        data = b"".join(memory[:n] for n in sizes)
        with CkptfsMount() as m:  # The default options.
            before = m.stats()["bytes_landed"]
            fd = os.open(m.path("shard"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            for n in sizes:
                self.assertEqual(os.write(fd, memoryview(memory)[:n]), n)
            os.close(fd)
            landed = m.stats()["bytes_landed"] - before
            # Threads already waiting for a request placed their blocks for an earlier write's
            # end: the first requests after a change of phase are copied (60-80% landed here).
            self.assertGreater(landed, len(data) // 3, "the records' blocks were copied")
            self.assertLessEqual(landed, len(data))
            with open(m.path("shard"), "rb") as f:
                self.assertTrue(f.read() == data, "the file differs from what was written")
            m.sync()
            with open(m.bpath("shard"), "rb") as f:
                self.assertTrue(f.read() == data, "the durable file differs")


class ForkedWriterTest(unittest.TestCase):
    """A process forked from a parent that holds its memory (Megatron-core's torch_dist writer
    processes) writes pages it shares copy-on-write: a direct write would have the kernel unshare
    (copy) each of them before handing it over. Its write-only opens go through the page cache,
    which reads the shared pages in place."""

    def setUp(self):
        require_fuse()

    def test_a_forked_writer_writes_its_parents_memory_without_unsharing_it(self):
        data = bytearray(os.urandom(MiB)) * 128  # The parent's state, touched.
        with CkptfsMount() as m:
            before = m.stats()["forked_writer_opens"]
            read_end, write_end = os.pipe()
            child = os.fork()
            if child == 0:
                try:
                    fd = os.open(m.path("shard"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    view = memoryview(data)
                    for at in range(0, len(data), 8 * MiB):
                        os.write(fd, view[at:at + 8 * MiB])
                    os.close(fd)
                    os.write(write_end, json.dumps(smaps_anon_kib(os.getpid())).encode())
                finally:
                    os._exit(0)
            os.close(write_end)
            with os.fdopen(read_end) as report:
                anon_kib, pss_anon_kib = json.loads(report.read() or "[0, 0]")
            os.waitpid(child, 0)
            self.assertGreater(anon_kib, len(data) // 1024)
            # Shared pages count half: unshared, the 128 MiB would count whole.
            self.assertLess(pss_anon_kib, anon_kib - len(data) // 1024 // 4,
                            "the child's copy of its parent's memory was unshared")
            self.assertEqual(m.stats()["forked_writer_opens"], before + 1)
            with open(m.path("shard"), "rb") as f:
                self.assertTrue(f.read() == data, "the shard differs from what was written")

            with open(m.path("own"), "wb") as f:  # The parent writes its own memory directly.
                f.write(data)
            self.assertEqual(m.stats()["forked_writer_opens"], before + 1)
            m.sync()
            with open(m.bpath("shard"), "rb") as f:
                self.assertTrue(f.read() == data, "the durable shard differs")


    def test_a_rank_a_fork_server_started_writes_the_state_it_built_direct(self):
        # The fork server holds torch (as the bench's and the tests' does): its child maps about
        # as much anonymous memory as it, the sizes alone would call it a forked writer.
        with CkptfsMount() as m:
            before = m.stats()["forked_writer_opens"]
            run_ranks(_write_own_state, 1, (m.path("rank0"), 128 * MiB))
            self.assertEqual(m.stats()["forked_writer_opens"], before)
            with open(m.path("rank0"), "rb") as f:
                self.assertTrue(f.read() == own_state(128 * MiB), "the file differs")

    def test_a_forked_writer_of_a_name_last_written_in_small_pieces_writes_it_direct(self):
        data = bytearray(os.urandom(MiB)) * 128  # The parent's state, touched: its child is forked.
        piece = os.urandom(5673)  # A 64x16 float32 tensor as torch.save writes it: unaligned.
        count = 200

        def save_in_a_forked_child(path):
            child = os.fork()
            if child == 0:
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    for _ in range(count):
                        os.write(fd, piece)
                    os.close(fd)
                finally:
                    os._exit(0)
            os.waitpid(child, 0)

        with CkptfsMount() as m:
            for step in ("step1", "step2", "step3"):
                os.mkdir(m.path(step))
            forked = m.stats()["forked_writer_opens"]
            requests = RequestCounter(m)
            save_in_a_forked_child(m.path("step1", "__0_0.distcp"))
            # Through the page cache, a write that starts in a page partly written is sent in two.
            self.assertGreater(requests.since()["write"], count + count // 2)
            self.assertEqual(m.stats()["forked_writer_opens"], forked + 1)
            save_in_a_forked_child(m.path("step2", "__0_0.distcp"))
            self.assertEqual(requests.since()["write"], count, "one request per write: direct")
            self.assertEqual(m.stats()["forked_writer_opens"], forked + 1)
            save_in_a_forked_child(m.path("step3", "other.distcp"))  # A name not seen yet.
            self.assertEqual(m.stats()["forked_writer_opens"], forked + 2)
            m.sync()
            for path in (("step1", "__0_0.distcp"), ("step2", "__0_0.distcp"),
                         ("step3", "other.distcp")):
                for where in (m.path(*path), m.bpath(*path)):
                    with open(where, "rb") as f:
                        self.assertTrue(f.read() == piece * count, f"{where} differs")


class PassthroughTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        require_root()  # The kernel registers backing files for CAP_SYS_ADMIN only.
        self.backing = None

    def save(self, m, name, data):
        with open(m.path(name), "wb") as f:
            f.write(data)
        m.sync()

    def test_reads_of_a_file_on_the_backing_store_bypass_the_daemon(self):
        big = os.urandom(3 * MiB + 123)
        with remounted({"big.pt": big, "small.txt": b"100"}) as m:  # On by default as root.
            before = m.stats()["bytes_read"]
            with open(m.path("big.pt"), "rb") as f:
                self.assertEqual(f.read(), big)
            with open(m.path("big.pt"), "rb") as f, \
                    mmap.mmap(f.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
                self.assertEqual(mm[MiB:2 * MiB], big[MiB:2 * MiB])
            self.assertEqual(m.stats()["bytes_read"], before)
            # Small files are read through the daemon.
            with open(m.path("small.txt"), "rb") as f:
                self.assertEqual(f.read(), b"100")
            self.assertEqual(m.stats()["bytes_read"], before + 3)

    def test_writers_are_refused_while_it_is_read_and_welcome_after(self):
        big = os.urandom(2 * MiB)
        with CkptfsMount() as m:
            self.save(m, "big.pt", big)
            m.unmount()
            with CkptfsMount(backing=m.backing) as m2:
                path = m2.path("big.pt")
                with open(path, "rb") as reader:
                    self.assertEqual(reader.read(PAGE), big[:PAGE])
                    for attempt in (lambda: os.open(path, os.O_WRONLY),
                                    lambda: os.open(path, os.O_RDWR),
                                    lambda: os.truncate(path, 0)):
                        with self.assertRaises(OSError) as caught:
                            attempt()
                        self.assertEqual(caught.exception.errno, errno.ETXTBSY)
                    # A second reader reads the same way.
                    with open(path, "rb") as second:
                        self.assertEqual(second.read(), big)
                with open(path, "r+b") as writer:
                    writer.write(b"new")
                with open(path, "rb") as f:
                    self.assertEqual(f.read(), b"new" + big[3:])
                m2.sync()
            with open(os.path.join(m.backing, "big.pt"), "rb") as f:
                self.assertEqual(f.read(), b"new" + big[3:])

    def test_off_reads_through_the_daemon_and_lets_writers_in(self):
        big = os.urandom(2 * MiB)
        with remounted({"big.pt": big}, ["passthrough=off"]) as m:
            with open(m.path("big.pt"), "rb") as reader:
                self.assertEqual(reader.read(), big)
                with open(m.path("big.pt"), "r+b") as writer:  # No refusal.
                    writer.write(b"x")
            self.assertGreaterEqual(m.stats()["bytes_read"], len(big))


if __name__ == "__main__":
    unittest.main()
