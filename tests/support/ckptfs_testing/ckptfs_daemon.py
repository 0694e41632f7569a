"""The one harness that runs ckptfs for the mount tests (harness.py builds on it),
the e2e tests and the bench: a daemon in the foreground (-f) as a child process, tree snapshots,
mount helpers.

    with CkptfsDaemon(backing, mnt, options=["cache_size=1G"]) as d:
        ...   # d.pid, d.worker_pid(), d.sync(), d.stats(), d.io(), d.vm_hwm_kib(), d.unmount(),
              # d.kill9()

Leaving the block always unmounts, waits for the daemon it started (killing only that pid if it
does not exit), and never touches any other process. Temp directories belong to the caller.
The binary is $CKPTFS_BIN (CTest sets it), else build*/ckptfs in the source tree.
"""

import contextlib
import ctypes
import fcntl
import glob
import hashlib
import os
import re
import resource
import signal
import stat
import subprocess
import time

from .stats import read_stats

SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ckptfs_bin():
    path = os.environ.get("CKPTFS_BIN")
    if path:
        return path
    for candidate in ["build/ckptfs"] + sorted(glob.glob(os.path.join(SOURCE_ROOT, "build*/ckptfs"))):
        full = os.path.join(SOURCE_ROOT, candidate)
        if os.access(full, os.X_OK):
            return full
    raise RuntimeError("set CKPTFS_BIN to the ckptfs binary")


def cache_memory_files(backing):
    """The cache memory files (fs/cache_memory_file.h) of backing directory `backing`, of every
    node."""
    st = os.stat(backing)
    name = f"ckptfs-cache-{st.st_dev:x}-{st.st_ino:x}"
    return sorted(os.path.join("/dev/shm", n) for n in os.listdir("/dev/shm")
                  if n == name or n.startswith(name + "-"))


def remove_unheld_cache_memory_files(backing):
    """Removes the cache memory files of `backing` that no live mount holds (a killed daemon
    leaves its file to the next mount: a test that made none must not leave it in /dev/shm)."""
    for path in cache_memory_files(backing):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(path)
        except OSError:
            pass  # Held: a live mount's.
        finally:
            os.close(fd)


def mount_entry(path):
    """The /proc/self/mountinfo fields of the mount at `path` (absolute, without symlinks; the
    last mount there wins), or None. Reads mountinfo only, so it never sends a request to a
    (possibly hung) FUSE daemon."""
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]) == path:
                sep = fields.index("-")
                found = {"dev": fields[2], "fstype": fields[sep + 1], "source": fields[sep + 2]}
    return found


def mounted(path):
    """True when `path` (absolute, without symlinks) is a mount point."""
    return mount_entry(path) is not None


def force_unmount(path, timeout=60):
    """fusermount3 -u, then a lazy unmount, then umount -l. True when unmounted."""
    for cmd in (["fusermount3", "-u", path], ["fusermount3", "-u", "-z", path], ["umount", "-l", path]):
        if not mounted(path):
            return True
        try:
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
        except (subprocess.TimeoutExpired, FileNotFoundError):
            pass
    return not mounted(path)


def proc_io(pid="self"):
    """/proc/PID/io as a dict of ints (for "self": includes children already waited for)."""
    out = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            k, v = line.split(":")
            out[k.strip()] = int(v)
    return out


def process_alive(pid):
    """Whether process `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


class CkptfsDaemon:
    """One ckptfs daemon run with -f as a child process over `backing`, mounted on `mnt`."""

    def __init__(self, backing, mnt, options=(), log_file=None, exit_timeout=300, nofile=None,
                 mount_timeout=30, wrapper=(), binary=None):
        """nofile: run the daemon with RLIMIT_NOFILE (soft and hard) set to this. wrapper: a
        command that execs the daemon's command line given after it (so the process started is
        the daemon), e.g. nsenter into a network namespace. binary: the ckptfs to run (default
        ckptfs_bin())."""
        self.binary = binary or ckptfs_bin()
        self.nofile = nofile
        self.wrapper = list(wrapper)
        self.backing = os.path.realpath(backing)
        self.mnt = os.path.realpath(mnt)
        self.options = list(options)
        self.log_file = log_file or os.path.join(os.path.dirname(self.mnt),
                                                 os.path.basename(self.mnt) + ".ckptfs.log")
        self.stderr_file = self.log_file + ".stderr"
        self.exit_timeout = exit_timeout
        self.mount_timeout = mount_timeout
        self.proc = None
        self.returncode = None
        self.killed = False
        self.supervised = True

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False

    @property
    def pid(self):
        """The supervisor: the process started, which holds the mount."""
        return self.proc.pid

    def worker_pid(self, wait=30):
        """The worker serving the mount now (the supervisor's child; fs/supervisor.h). Read from
        /proc, so it works while the worker is stopped or hung; waits up to `wait` seconds for
        one while none runs (between two workers), then raises."""
        if not self.supervised:
            return self.pid
        deadline = time.monotonic() + wait
        while True:
            try:
                with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:
                    children = f.read().split()
            except FileNotFoundError:
                children = []
            for child in children:  # Also fusermount3 (auto_unmount) may be one.
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as f:
                        if b"\0--worker\0" in f.read():
                            return int(child)
                except (FileNotFoundError, ProcessLookupError):
                    pass  # It ended meanwhile (a killed worker): not the one serving.
            if time.monotonic() > deadline:
                raise RuntimeError("the ckptfs supervisor has no worker")
            time.sleep(0.01)

    def start(self):
        """Starts the daemon (again, e.g. after kill9) and waits until the mount is live."""
        # auto_unmount: should the test or bench be killed, its daemon dies with it and
        # fusermount3 removes the mount.
        opts = ",".join(["log_file=" + self.log_file, "auto_unmount"] + self.options)
        self._out = open(self.stderr_file, "ab")
        limit = None
        if self.nofile:
            limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))
        self.proc = subprocess.Popen([*self.wrapper, self.binary, self.backing, self.mnt, "-f",
                                      "-o", opts],
                                     stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._out,
                                     preexec_fn=limit)
        self.returncode = None
        self.killed = False
        deadline = time.monotonic() + self.mount_timeout
        while not mounted(self.mnt):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ckptfs exited with {self.proc.returncode} before mounting:\n"
                                   + self.output())
            if time.monotonic() > deadline:
                raise RuntimeError(f"ckptfs did not mount within {self.mount_timeout}s:\n"
                                   + self.output())
            time.sleep(0.02)
        entry = mount_entry(self.mnt)
        if not entry["fstype"].startswith("fuse"):
            raise RuntimeError(f"unexpected mount at {self.mnt}: {entry}")
        # The supervisor mounts before its worker serves: this first request waits for the worker
        # (which has set up the backing store by then), or fails when it could not start.
        try:
            # Binaries before the supervisor (the bench's baselines) have no worker.
            self.supervised = "worker" in self.stats()
        except OSError as e:
            raise RuntimeError(f"the mount at {self.mnt} does not serve ({e}):\n" + self.output())

    def sync(self, timeout=600):
        """`ckptfs sync MNT`; raises with its output when it fails."""
        r = run_ckptfs(["sync", self.mnt], timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"ckptfs sync failed ({r.returncode}): {r.stdout}{r.stderr}")
        return r

    def stats(self):
        """The mount's stats, checked against core/stats/stats_schema.json (stats.read_stats); those
        of another binary than the one built here (a bench's --baseline, an older main) may lack
        the keys added since."""
        return read_stats(os.path.join(self.mnt, ".ckptfs", "stats"),
                          older=self.binary != ckptfs_bin())

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def bpath(self, *parts):
        return os.path.join(self.backing, *parts)

    def io(self):
        return proc_io(self.worker_pid())

    def vm_hwm_kib(self):
        return proc_kib(f"/proc/{self.worker_pid()}/status", "VmHWM")

    def vm_rss_kib(self):
        return proc_kib(f"/proc/{self.worker_pid()}/status", "VmRSS")

    def cpu_seconds(self):
        """User plus system CPU time the worker has used so far (all its threads)."""
        with open(f"/proc/{self.worker_pid()}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def unmount(self, timeout=None):
        """fusermount3 -u, then waits for the daemon to flush and exit; returns its exit code."""
        if self.proc is None:
            return self.returncode
        if mounted(self.mnt):
            r = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True, text=True,
                               timeout=60)
            if r.returncode != 0 and mounted(self.mnt):
                raise RuntimeError(f"fusermount3 -u {self.mnt} failed: {r.stderr.strip()}")
        return self.wait_exit(timeout)

    def wait_exit(self, timeout=None):
        """Waits for the daemon to exit and returns its exit code; raises when it had to be
        killed (only this pid) after the timeout (default exit_timeout)."""
        if self.proc is None:
            return self.returncode
        if self._reap(timeout):
            raise RuntimeError(f"ckptfs did not exit within {timeout or self.exit_timeout}s "
                               "after unmount; killed it\n" + self.output()[-4000:])
        return self.returncode

    def kill9(self):
        """SIGKILLs the daemon (a crash), reaps it, waits until its worker (which the kernel kills
        with it) is gone too, and detaches the dead mount."""
        try:
            worker = self.worker_pid(wait=0)
        except RuntimeError:
            worker = None
        os.kill(self.proc.pid, signal.SIGKILL)
        self._reap()
        deadline = time.monotonic() + 60
        while worker and process_alive(worker) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.killed = True
        if not force_unmount(self.mnt, timeout=20):
            raise RuntimeError(f"cannot unmount the dead mount {self.mnt}")
        return self.returncode

    def _reap(self, timeout=None):
        """Waits for the daemon to exit, killing it (only this pid) after the timeout; returns
        whether it had to be killed."""
        killed = False
        try:
            self.returncode = self.proc.wait(timeout=timeout or self.exit_timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.returncode = self.proc.wait()
            killed = True
        self.proc = None
        self._out.close()
        return killed

    def cleanup(self):
        """Unmounts and reaps the daemon, whatever state things are in. Never raises; returns
        what went wrong, one line each."""
        problems = []
        try:
            if mounted(self.mnt):
                force_unmount(self.mnt, timeout=20)
            if self.proc is not None and self._reap():
                problems.append("ckptfs did not exit after unmount; killed it")
            if mounted(self.mnt) and not force_unmount(self.mnt, timeout=20):
                problems.append(f"{self.mnt} is still mounted")
            if os.path.isdir(self.backing):
                remove_unheld_cache_memory_files(self.backing)
        except Exception as e:
            problems.append(f"cleanup failed: {e}")
        return problems

    def output(self):
        text = ""
        for p in (self.log_file, self.stderr_file):
            try:
                with open(p, errors="replace") as f:
                    text += f.read()
            except FileNotFoundError:
                pass
        return text

    def error_lines(self):
        return error_lines(self.output())


THP_SHMEM = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
SHM = "/dev/shm"


def shm_huge():
    """The huge= option of the tmpfs on /dev/shm ("never" when it has none)."""
    huge = "never"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == SHM:
                options = fields[fields.index("-") + 3].split(",")
                huge = next((o[5:] for o in options if o.startswith("huge=")), "never")
    return huge


def _set_shm_huge(value):
    """Sets huge=value on /dev/shm's tmpfs, keeping its other options (fspick + fsconfig)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.fspick(-100, SHM.encode(), 1)  # AT_FDCWD, FSPICK_CLOEXEC
    if fd < 0:
        raise OSError(ctypes.get_errno(), "fspick /dev/shm")
    try:
        if (libc.fsconfig(fd, 1, b"huge", value.encode(), 0) != 0 or  # FSCONFIG_SET_STRING
                libc.fsconfig(fd, 7, None, None, 0) != 0):  # FSCONFIG_CMD_RECONFIGURE
            raise OSError(ctypes.get_errno(), f"fsconfig /dev/shm huge={value}")
    finally:
        os.close(fd)


def _set_thp_shmem(value):
    with open(THP_SHMEM, "w") as f:
        f.write(value)


@contextlib.contextmanager
def kernel_without_huge_pages():
    """As root, sets the kernel as Debian's and Ubuntu's ship it, giving shared memory no huge
    pages (/dev/shm without huge=, shmem_enabled never) for the block, and restores both after."""
    if os.geteuid() != 0:
        raise PermissionError("needs root: sets the kernel's huge page settings")
    with open(THP_SHMEM) as f:
        shmem = f.read().split("[", 1)[1].split("]", 1)[0]
    huge = shm_huge()
    _set_shm_huge("never")
    _set_thp_shmem("never")
    try:
        yield
    finally:
        _set_thp_shmem(shmem)
        _set_shm_huge(huge)


def proc_kib(path, key):
    """The KiB a /proc file such as /proc/PID/status gives on its line `key:`, 0 without one."""
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def shared_memory_huge_pages_kib(pid):
    """KiB of shared memory mapped with huge pages by process `pid` (ShmemPmdMapped)."""
    return proc_kib(f"/proc/{pid}/smaps_rollup", "ShmemPmdMapped")


def read_or_none(path):
    """The bytes of file `path`; None when there is none."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def wait_for(predicate, timeout, what):
    """Waits until predicate() holds; fails after timeout seconds saying `what` (a text, or a
    function that returns one)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what() if callable(what) else what}: not after {timeout:.0f}s")
        time.sleep(0.05)


def run_ckptfs(args, timeout=30):
    """The ckptfs program with `args` (a client command, or a mount expected to fail)."""
    return subprocess.run([ckptfs_bin()] + list(args), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# A daemon's error log lines, and the reports of sanitizers built into it.
ERROR_LINE = re.compile(r"\[(error|critical)\]|(ERROR|WARNING): \w+Sanitizer|runtime error:",
                        re.IGNORECASE)


def error_lines(text):
    return [line for line in text.splitlines() if ERROR_LINE.search(line)]


def snapshot(root, skip_root=(".ckptfs",), contents="sha256", with_nlink=False):
    """{relative path: description} of every entry under root (root itself and the root entries
    named in skip_root excluded): files ("f", mode, size, sha256 or, with contents="bytes", the
    bytes), directories ("d", mode), symlinks ("l", target), FIFOs, sockets and device nodes
    ("n", type, mode, device), never opened; all but symlinks end with their link count when
    with_nlink. Reads every byte of the files."""
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in skip_root]
            filenames = [f for f in filenames if f not in skip_root]
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                tree[rel] = ("l", os.readlink(p))
                continue
            if stat.S_ISDIR(st.st_mode):
                desc = ("d", oct(stat.S_IMODE(st.st_mode)))
            elif stat.S_ISREG(st.st_mode):
                desc = ("f", oct(stat.S_IMODE(st.st_mode)), st.st_size, _contents(p, contents))
            else:
                desc = ("n", stat.S_IFMT(st.st_mode), oct(stat.S_IMODE(st.st_mode)), st.st_rdev)
            tree[rel] = desc + (st.st_nlink,) if with_nlink else desc
    return tree


def _contents(path, contents):
    with open(path, "rb") as f:
        if contents == "bytes":
            return f.read()
        h = hashlib.sha256()
        while True:
            b = f.read(8 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def describe_tree_diff(a, b, name_a="expected", name_b="actual", limit=40):
    """The differences between two trees ({relative path: description}, as snapshot() makes
    them), one line each, at most `limit` lines."""
    lines = []
    for k in sorted(set(a) | set(b)):
        if k not in b:
            lines.append(f"only in {name_a}: {k} {_short(a[k])}")
        elif k not in a:
            lines.append(f"only in {name_b}: {k} {_short(b[k])}")
        elif a[k] != b[k]:
            lines.append(f"differs: {k}: {name_a}={_short(a[k])} {name_b}={_short(b[k])}")
    more = len(lines) - limit
    return "\n".join(lines[:limit]) + (f"\n... {more} more" if more > 0 else "")


def _short(desc):
    out = []
    for x in desc:
        if isinstance(x, bytes) and len(x) > 40:
            out.append(f"<{len(x)} bytes {x[:16]!r}...>")
        else:
            out.append(repr(x))
    return "(" + ", ".join(out) + ")"
