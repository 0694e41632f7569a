"""Memory pressure: with cache_size=256M, 4 writer processes each write one large file (written
1 MiB at a time, kept open while they also write their small files) and ~1000 small files, while
2 reader processes read back and verify the files the writers have closed.

Checks: no write fails; the daemon's peak RSS (VmHWM) stays within cache_size + OVERHEAD
(256 MiB + 128 MiB); every byte reads back right through the mount (the readers verify every
closed file) and, after `ckptfs sync`, in BACKING.

MemoryPressureTest, the default run: 256 MiB + 1000 small files per writer (1 GiB + 4000 files).
MemoryPressureLongTest, the long variant, runs only with CKPTFS_LONG_TESTS=1: 2 GiB + 4000 small
files per writer (8 GiB + 16000 files); without it, it is reported as skipped.
The seed (of the contents) is printed; CKPTFS_PRESSURE_SEED=N replays it.
"""

import multiprocessing
import os
import random
import sys
import time
import traceback
import unittest

import numpy as np

from ckptfs_testing.harness import (CkptfsMount, choose_seed, require_fuse, require_long,
                                    run_processes)

MiB = 1 << 20
CACHE = 256 * MiB
OVERHEAD = 128 * MiB  # Daemon code, libfuse/io_uring buffers, metadata of ~20,000 files.
WRITERS, READERS = 4, 2
BIG_ID = 1 << 20  # File id of a writer's large file: BIG_ID + writer.


class Content:
    """Deterministic, position-dependent bytes: block j of file f is a random 1 MiB base XORed
    with (f, j) in every 8-byte word, so misplaced or stale blocks never verify."""

    def __init__(self, seed):
        self.base = np.random.default_rng(seed).integers(0, 1 << 63, MiB // 8, dtype=np.uint64)
        self.buf = np.empty_like(self.base)

    def block(self, file_id, j, size=MiB):
        """A view of the first `size` bytes of the block, valid until the next call."""
        np.bitwise_xor(self.base, np.uint64((file_id << 32) | j), out=self.buf)
        return self.buf.view(np.uint8).data[:size]

    def verify(self, path, file_id, size):
        """Raises AssertionError unless path holds exactly file_id's `size` bytes."""
        with open(path, "rb", buffering=0) as f:
            j = 0
            while j * MiB < size:
                want = self.block(file_id, j, min(MiB, size - j * MiB))
                got = f.read(MiB)
                if got != want:
                    raise AssertionError(f"{path}: block {j} differs ({len(got)} bytes read)")
                j += 1
            extra = f.read(1)
            if extra:
                raise AssertionError(f"{path}: longer than {size} bytes")


def small_files(writer, count):
    """[(file id, relative path, size)] of a writer's small files: 1 to 16 KiB."""
    rng = random.Random(writer)
    return [(writer * count + i, f"w{writer}/s{i // 100:02d}/f{i:05d}", rng.randint(1, 16 << 10))
            for i in range(count)]


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def writer_main(mnt, seed, writer, big_mib, small_count, closed, results):
    try:
        content = Content(seed)
        smalls = small_files(writer, small_count)
        for d in sorted({os.path.dirname(rel) for _, rel, _ in smalls}):
            os.makedirs(os.path.join(mnt, d), exist_ok=True)
        big_rel = f"w{writer}/big"
        fd = os.open(os.path.join(mnt, big_rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for j in range(big_mib):
            write_all(fd, content.block(BIG_ID + writer, j))
            # The small files go between the large file's blocks: the large one stays open.
            for fid, rel, size in smalls[j * len(smalls) // big_mib:
                                         (j + 1) * len(smalls) // big_mib]:
                sfd = os.open(os.path.join(mnt, rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                write_all(sfd, content.block(fid, 0, size))
                os.close(sfd)
                closed.put((fid, rel, size))
        os.close(fd)
        closed.put((BIG_ID + writer, big_rel, big_mib * MiB))
        # Each queue has its own feeder thread: the closed files reach the pipe before the
        # result does, or the parent's stop sentinels could overtake the last of them.
        closed.close()
        closed.join_thread()
        results.put(("writer", writer, None))
    except BaseException:
        results.put(("writer", writer, traceback.format_exc()))


def reader_main(mnt, seed, reader, closed, results):
    """Verifies closed files as they come; now and then one read before (served from BACKING
    once evicted). Stops at the None sentinel."""
    try:
        content = Content(seed)
        rng = random.Random(seed * 10 + reader)
        seen = []
        verified = []
        while True:
            item = closed.get(timeout=300)
            if item is None:
                break
            fid, rel, size = item
            content.verify(os.path.join(mnt, rel), fid, size)
            verified.append(rel)
            if fid < BIG_ID:
                seen.append(item)
            if seen and rng.random() < 0.1:  # Small files only: a large one takes too long.
                fid, rel, size = rng.choice(seen)
                content.verify(os.path.join(mnt, rel), fid, size)
        results.put(("reader", reader, verified))
    except BaseException:
        results.put(("reader", reader, traceback.format_exc()))


class PressureRun(unittest.TestCase):
    def run_pressure(self, big_mib, small_count, timeout):
        require_fuse()
        seed = choose_seed("CKPTFS_PRESSURE_SEED", "memory pressure")
        ctx = multiprocessing.get_context("fork")
        with CkptfsMount(options=[f"cache_size={CACHE // MiB}M"]) as m:
            closed, results = ctx.Queue(), ctx.Queue()
            writers = [ctx.Process(target=writer_main,
                                   args=(m.mnt, seed, w, big_mib, small_count, closed, results))
                       for w in range(WRITERS)]
            readers = [ctx.Process(target=reader_main, args=(m.mnt, seed, r, closed, results))
                       for r in range(READERS)]
            done = {}

            def on_result(item):
                kind, i, res = item
                self.assertNotIsInstance(res, str, f"seed {seed}: {kind} {i} failed:\n{res}")
                done[(kind, i)] = res
                if kind == "writer" and sum(k == "writer" for k, _ in done) == WRITERS:
                    for _ in readers:
                        closed.put(None)  # The readers stop once they verified everything.
            t0 = time.monotonic()
            run_processes(writers + readers, results, timeout, on_result,
                          describe=lambda: f"seed {seed}, {sorted(done)} did; stats: {m.stats()}")
            elapsed = time.monotonic() - t0
            hwm = m.vm_hwm_kib() << 10
            stats = m.stats()
            verified = sum(len(v) for (k, _), v in done.items() if k == "reader")
            print(f"\n{WRITERS} x ({big_mib} MiB + {small_count} small files) in {elapsed:.1f}s, "
                  f"daemon VmHWM {hwm / MiB:.0f} MiB, {verified} files verified by the readers; "
                  f"stats: {stats}", file=sys.stderr)
            self.assertEqual(verified, WRITERS * (small_count + 1),
                             "the readers did not verify every file")
            self.assertLessEqual(hwm, CACHE + OVERHEAD,
                                 f"daemon peak RSS {hwm / MiB:.0f} MiB exceeds cache_size "
                                 f"{CACHE / MiB:.0f} MiB + {OVERHEAD / MiB:.0f} MiB")
            self.assertLessEqual(stats["memory_used"], CACHE, stats)
            m.sync(timeout=timeout)
            t_sync = time.monotonic()
            content = Content(seed)
            for w in range(WRITERS):
                content.verify(m.bpath(f"w{w}", "big"), BIG_ID + w, big_mib * MiB)
                for fid, rel, size in small_files(w, small_count):
                    content.verify(m.bpath(rel), fid, size)
            print(f"sync {t_sync - t0 - elapsed:.1f}s, "
                  f"verify BACKING {time.monotonic() - t_sync:.1f}s", file=sys.stderr)
            self.assertEqual(m.unmount(), 0)


class MemoryPressureTest(PressureRun):
    def test_256mib_cache(self):
        self.run_pressure(big_mib=256, small_count=1000, timeout=120)


class MemoryPressureLongTest(PressureRun):
    """The long variant: only with CKPTFS_LONG_TESTS=1."""

    def test_256mib_cache(self):
        require_long()
        self.run_pressure(big_mib=2048, small_count=4000, timeout=900)


if __name__ == "__main__":
    unittest.main()
