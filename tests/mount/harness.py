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
import json
import os
import queue
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE_ROOT, "tests", "e2e"))

# Shared with the e2e tests and the bench.
from ckptfs_daemon import (ckptfs_bin, describe_tree_diff, error_lines,  # noqa: E402,F401
                           force_unmount, mount_entry, mounted)

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


def daemon_vm_hwm(pid):
    """Peak resident memory (VmHWM) of process pid, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) << 10
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


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


def walk_tree(root, skip_root_names=(".ckptfs",), with_nlink=True):
    """{relative path: description} of every entry under root (root itself excluded).

    Files: ("f", mode, size, bytes[, nlink]); dirs: ("d", mode); symlinks: ("l", target).
    """
    tree = {}

    def visit(rel):
        full = os.path.join(root, rel) if rel else root
        for name in sorted(os.listdir(full)):
            if not rel and name in skip_root_names:
                continue
            r = os.path.join(rel, name) if rel else name
            p = os.path.join(root, r)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                tree[r] = ("l", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                tree[r] = ("d", oct(stat.S_IMODE(st.st_mode)))
                if with_nlink:
                    tree[r] += (st.st_nlink,)
                visit(r)
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    data = f.read()
                desc = ("f", oct(stat.S_IMODE(st.st_mode)), st.st_size, data)
                if with_nlink:
                    desc += (st.st_nlink,)
                tree[r] = desc
            else:
                tree[r] = ("?", st.st_mode)

    visit("")
    return tree


class CkptfsMount:
    """A ckptfs daemon run with -f on a temp mount point, over a temp (or given) backing dir."""

    def __init__(self, options=(), backing=None, expect_errors=(), mount_timeout=MOUNT_TIMEOUT,
                 exit_timeout=EXIT_TIMEOUT, mnt=None):
        self.options = list(options)
        self.expect_errors = [re.compile(e) for e in expect_errors]
        self.mount_timeout = mount_timeout
        self.exit_timeout = exit_timeout
        self.workdir = os.path.realpath(tempfile.mkdtemp(prefix="ckptfs-mt-"))
        os.chmod(self.workdir, 0o755)  # Other users (permission tests) must reach the mount.
        self._own_backing = backing is None
        self.backing = backing or os.path.join(self.workdir, "backing")
        if self._own_backing:
            os.mkdir(self.backing, 0o755)
        self._own_mnt = mnt is None
        self.mnt = mnt or os.path.join(self.workdir, "mnt")
        if self._own_mnt:
            os.mkdir(self.mnt, 0o755)
        self.log_file = os.path.join(self.workdir, "daemon.log")
        self.stderr_file = os.path.join(self.workdir, "daemon.stderr")
        self.proc = None
        self.returncode = None
        self.killed = False
        self._exit_hooks = []

    def on_exit(self, fn):
        """Runs fn() when the mount context is left, before the temp dirs are removed."""
        self._exit_hooks.append(fn)

    # --- life cycle ---------------------------------------------------------------------------

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self._cleanup()
            raise
        return self

    def start(self):
        """Starts the daemon (again, e.g. after kill9) and waits until the mount is live."""
        # auto_unmount: should this test be killed (a CTest timeout), its daemon dies with it and
        # fusermount3 removes the mount.
        opts = ",".join(["log_file=" + self.log_file, "auto_unmount"] + self.options)
        cmd = [ckptfs_bin(), self.backing, self.mnt, "-f", "-o", opts]
        self._stderr = open(self.stderr_file, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._stderr,
                                     stderr=self._stderr)
        self.returncode = None
        self.killed = False
        deadline = time.monotonic() + self.mount_timeout
        while not mounted(self.mnt):
            if self.proc.poll() is not None:
                raise AssertionError(f"ckptfs exited with {self.proc.returncode} before mounting:\n"
                                     + self.daemon_output())
            if time.monotonic() > deadline:
                raise AssertionError(f"ckptfs did not mount within {self.mount_timeout}s:\n"
                                     + self.daemon_output())
            time.sleep(0.02)
        entry = mount_entry(self.mnt)
        if not entry["fstype"].startswith("fuse"):
            raise AssertionError(f"unexpected mount at {self.mnt}: {entry}")

    def unmount(self, timeout=None):
        """Unmounts cleanly and waits for the daemon; returns its exit code."""
        if self.proc is None:
            return self.returncode
        if mounted(self.mnt):
            r = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True, text=True,
                               timeout=30)
            if r.returncode != 0 and mounted(self.mnt):
                raise AssertionError(f"fusermount3 -u {self.mnt} failed: {r.stderr.strip()}")
        return self.wait_exit(timeout)

    def wait_exit(self, timeout=None):
        """Waits for the daemon this harness started; kills that pid when it does not exit."""
        if self.proc is None:
            return self.returncode
        try:
            self.returncode = self.proc.wait(timeout=timeout or self.exit_timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # Only the pid we started.
            self.returncode = self.proc.wait()
            self.proc = None
            self._stderr.close()
            raise AssertionError(f"ckptfs did not exit within {timeout or self.exit_timeout}s "
                                 "after unmount; killed it\n" + self.daemon_output())
        self.proc = None
        self._stderr.close()
        return self.returncode

    def kill9(self):
        """SIGKILLs the daemon (a crash), reaps it, and detaches the dead mount."""
        pid = self.proc.pid
        os.kill(pid, signal.SIGKILL)
        self.returncode = self.proc.wait()
        self.proc = None
        self._stderr.close()
        self.killed = True
        if not force_unmount(self.mnt, timeout=20):
            raise AssertionError(f"cannot unmount the dead mount {self.mnt}")
        return self.returncode

    def __exit__(self, exc_type, exc, tb):
        problems = self._cleanup()
        if exc_type is None and problems:
            raise AssertionError(problems)
        return False

    def _cleanup(self):
        problems = []
        try:
            if self.proc is not None and self.proc.poll() is None:
                if mounted(self.mnt):
                    force_unmount(self.mnt, timeout=20)
                try:
                    self.returncode = self.proc.wait(timeout=self.exit_timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()  # Only the pid we started.
                    self.returncode = self.proc.wait()
                    problems.append("ckptfs did not exit after unmount; killed it")
                self._stderr.close()
                self.proc = None
            elif self.proc is not None:
                self.returncode = self.proc.wait()
                self._stderr.close()
                self.proc = None
            if mounted(self.mnt) and not force_unmount(self.mnt, timeout=20):
                problems.append(f"{self.mnt} is still mounted")
            errors = self.unexpected_errors()
            if errors:
                problems.append("the daemon logged unexpected errors:\n" + "\n".join(errors))
        finally:
            for fn in reversed(self._exit_hooks):
                try:
                    fn()
                except Exception as e:  # Keep cleaning up.
                    problems.append(f"exit hook failed: {e}")
            if problems or os.environ.get("CKPTFS_KEEP_LOGS"):
                sys.stderr.write(f"\n--- daemon output ({self.workdir}) ---\n"
                                 + self.daemon_output()[-4000:] + "\n")
            if not mounted(self.mnt):
                if self._own_backing:
                    shutil.rmtree(self.backing, ignore_errors=True)
                shutil.rmtree(self.workdir, ignore_errors=True)
        return "\n".join(problems)

    # --- inspection ---------------------------------------------------------------------------

    def daemon_output(self):
        text = ""
        for path in (self.log_file, self.stderr_file):
            try:
                with open(path, errors="replace") as f:
                    text += f.read()
            except FileNotFoundError:
                pass
        return text

    def error_lines(self):
        return error_lines(self.daemon_output())

    def unexpected_errors(self):
        return [l for l in self.error_lines() if not any(e.search(l) for e in self.expect_errors)]

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def bpath(self, *parts):
        return os.path.join(self.backing, *parts)

    def stats(self):
        with open(os.path.join(self.mnt, ".ckptfs", "stats")) as f:
            return json.load(f)

    def sync(self, timeout=60):
        """Runs `ckptfs sync MNT`; fails the test when it does not exit 0."""
        r = run_ckptfs(["sync", self.mnt], timeout=timeout)
        if r.returncode != 0:
            raise AssertionError(f"ckptfs sync failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def staging_files(self):
        try:
            return sorted(os.listdir(os.path.join(self.backing, ".ckptfs", "staging")))
        except FileNotFoundError:
            return []


def run_ckptfs(args, timeout=30):
    return subprocess.run([ckptfs_bin()] + list(args), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def errno_name(e):
    return errno.errorcode.get(e.errno, str(e.errno))
