"""Harness for mount tests: runs a ckptfs daemon in the foreground on temp directories.

Usage:

    with CkptfsMount(options=["flush_delay=5s"]) as m:
        ...                     # m.mnt, m.backing, m.stats(), m.sync(), m.unmount()
    # Leaving the block always unmounts, reaps the daemon it started (killing only that pid if it
    # does not exit), removes the temp dirs it made, and fails when the daemon logged an [error]
    # line that the test did not announce with expect_errors=[regex, ...].

The ckptfs binary comes from $CKPTFS_BIN (CTest sets it), else build*/ckptfs in the source tree.
Only the absence of /dev/fuse makes a test skip (require_fuse()).
"""

import errno
import hashlib
import multiprocessing
import os
import queue
import random
import re
import shutil
import sys
import tempfile
import time
import unittest

# Shared with the e2e tests and the bench.
from .ckptfs_daemon import (CkptfsDaemon, ckptfs_bin, describe_tree_diff,  # noqa: F401
                            cache_memory_files, force_unmount, kernel_without_huge_pages, mounted,
                            run_ckptfs, shared_memory_huge_pages_kib, shm_huge, snapshot,
                            THP_SHMEM, wait_for)

MOUNT_TIMEOUT = 15.0  # Seconds for the daemon to show up in mountinfo.
EXIT_TIMEOUT = 60.0  # Seconds for the daemon to flush and exit after unmount.


def require_fuse():
    """Skip (visibly) when this machine has no FUSE device."""
    if not os.path.exists("/dev/fuse"):
        raise unittest.SkipTest("/dev/fuse is absent: FUSE mount tests cannot run here")


def require_root():
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root (runs processes as uid 65534)")


LONG_TESTS = os.environ.get("CKPTFS_LONG_TESTS") == "1"


def require_long():
    """Long variants run only with CKPTFS_LONG_TESTS=1; otherwise they are reported as skipped."""
    if not LONG_TESTS:
        raise unittest.SkipTest("long variant: set CKPTFS_LONG_TESTS=1 to run it")


def choose_seed(env_var, what):
    """$env_var when set (a replay), else a fresh random seed; printed either way."""
    seed = int(os.environ.get(env_var) or random.randrange(1 << 30))
    print(f"\n{what} seed: {seed} (set {env_var}={seed} to replay)", file=sys.stderr, flush=True)
    return seed


def run_processes(procs, results, timeout, on_result=None, describe=lambda: ""):
    """Starts the multiprocessing.Process objects `procs` (each puts one item on the queue
    `results` when it ends) and returns the items in arrival order, calling on_result(item) as
    each arrives. Fails (with describe()) when they take longer than timeout seconds. Always
    joins them, killing only these processes when they do not exit."""
    t0 = time.monotonic()
    for p in procs:
        p.start()
    items = []
    try:
        while len(items) < len(procs):
            try:
                item = results.get(timeout=max(1.0, t0 + timeout - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{len(procs) - len(items)} of {len(procs)} processes did "
                                     f"not finish within {timeout}s; {describe()}") from None
            items.append(item)
            if on_result:
                on_result(item)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()  # Only the processes this test started.
                p.join()
    return items


class CkptfsMount(CkptfsDaemon):
    """A ckptfs daemon on a temp mount point, over a temp (or given) backing dir, for one `with`
    block: leaving it fails when the daemon logged an unannounced error."""

    def __init__(self, options=(), backing=None, expect_errors=(), mount_timeout=MOUNT_TIMEOUT,
                 exit_timeout=EXIT_TIMEOUT, mnt=None):
        self.expect_errors = [re.compile(e) for e in expect_errors]
        self.workdir = os.path.realpath(tempfile.mkdtemp(prefix="ckptfs-mt-"))
        os.chmod(self.workdir, 0o755)  # Other users (permission tests) must reach the mount.
        self._own_backing = backing is None
        if self._own_backing:
            backing = os.path.join(self.workdir, "backing")
            os.mkdir(backing, 0o755)
        if mnt is None:
            mnt = os.path.join(self.workdir, "mnt")
            os.mkdir(mnt, 0o755)
        super().__init__(backing, mnt, options, log_file=os.path.join(self.workdir, "daemon.log"),
                         exit_timeout=exit_timeout, mount_timeout=mount_timeout)
        self._exit_hooks = []

    def on_exit(self, fn):
        """Runs fn() when the mount context is left, before the temp dirs are removed."""
        self._exit_hooks.append(fn)

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self._leave()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        problems = self._leave()
        if exc_type is None and problems:
            raise AssertionError(problems)
        return False

    def _leave(self):
        """Cleans up (daemon, exit hooks, temp dirs); returns what went wrong."""
        problems = self.cleanup()
        errors = self.unexpected_errors()
        if errors:
            problems.append("the daemon logged unexpected errors:\n" + "\n".join(errors))
        for fn in reversed(self._exit_hooks):
            try:
                fn()
            except Exception as e:  # Keep cleaning up.
                problems.append(f"exit hook failed: {e}")
        if problems or os.environ.get("CKPTFS_KEEP_LOGS"):
            sys.stderr.write(f"\n--- daemon output ({self.workdir}) ---\n"
                             + self.output()[-4000:] + "\n")
        if not mounted(self.mnt):
            if self._own_backing:
                shutil.rmtree(self.backing, ignore_errors=True)
            shutil.rmtree(self.workdir, ignore_errors=True)
        return "\n".join(problems)

    def unexpected_errors(self):
        return [l for l in self.error_lines() if not any(e.search(l) for e in self.expect_errors)]

    def staging_files(self):
        try:
            return sorted(os.listdir(os.path.join(self.backing, ".ckptfs", "staging")))
        except FileNotFoundError:
            return []


MiB = 1 << 20


def stream_block(j):
    """Block j (1 MiB) of what a StreamWriter writes: distinct for every j."""
    return hashlib.sha256(b"%d" % j).digest() * (MiB // 32)


def stream_bytes(size):
    """The first `size` bytes a StreamWriter writes."""
    return b"".join(stream_block(j) for j in range((size + MiB - 1) // MiB))[:size]


def _stream(path, phases, acked, gates, results):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        j = 0
        for phase, mib in enumerate(phases):
            if phase > 0:
                gates[phase - 1].wait()
            for _ in range(mib):
                os.write(fd, stream_block(j))
                j += 1
                acked.value = j * MiB
        os.close(fd)
        results.put("ok")
    except OSError as e:
        results.put(f"{errno_name(e)}: {e}")


class StreamWriter:
    """A child process that writes the file `path` as dd does: 1 MiB writes of stream_block(0),
    stream_block(1), ...; `phases[i]` MiB in phase i, each phase after the first waiting for
    go_on(). A `with` block starts it and, on leaving, kills it (only its pid) if it still runs."""

    def __init__(self, path, phases):
        ctx = multiprocessing.get_context("fork")
        self._acked = ctx.Value("q", 0, lock=False)
        self._gates = [ctx.Event() for _ in phases[1:]]
        self._results = ctx.Queue()
        self.proc = ctx.Process(target=_stream, daemon=True,
                                args=(path, list(phases), self._acked, self._gates, self._results))

    def __enter__(self):
        self.proc.start()
        return self

    def __exit__(self, *exc):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=30)
        return False

    def acknowledged(self):
        """Bytes its writes have returned so far."""
        return self._acked.value

    def wait_acknowledged(self, size, timeout):
        wait_for(lambda: self.acknowledged() >= size or not self.proc.is_alive(), timeout,
                 lambda: f"{size} bytes written (only {self.acknowledged()})")
        if self.acknowledged() < size:
            raise AssertionError(f"the writer ended after {self.acknowledged()} bytes: "
                                 f"{self.result(0)}")

    def go_on(self, phase):
        self._gates[phase - 1].set()

    def result(self, timeout):
        """"ok" once it closed the file, else the errno and message of its failed call; fails
        when it has not ended within `timeout` seconds (a writer that hangs)."""
        try:
            return self._results.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the writer still runs after {timeout}s, "
                                 f"{self.acknowledged()} bytes written") from None


def errno_name(e):
    return errno.errorcode.get(e.errno, str(e.errno))
