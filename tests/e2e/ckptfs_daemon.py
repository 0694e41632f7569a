"""Runs one ckptfs daemon in the foreground (-f) as a child process, for the e2e tests and the bench.

    with CkptfsDaemon(backing, mnt, options=["cache_size=1G"]) as d:
        ...   # d.pid, d.sync(), d.stats(), d.io(), d.vm_hwm_kib(), d.unmount()

Leaving the block always unmounts, waits for the daemon it started (killing only that pid if it
does not exit), and never touches any other process. Temp directories belong to the caller.
The binary is $CKPTFS_BIN (CTest sets it), else build*/ckptfs in the source tree.
"""

import glob
import hashlib
import json
import os
import re
import resource
import stat
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(HERE))


def ckptfs_bin():
    path = os.environ.get("CKPTFS_BIN")
    if path:
        return path
    for candidate in ["build/ckptfs"] + sorted(glob.glob(os.path.join(SOURCE_ROOT, "build*/ckptfs"))):
        full = os.path.join(SOURCE_ROOT, candidate)
        if os.access(full, os.X_OK):
            return full
    raise RuntimeError("set CKPTFS_BIN to the ckptfs binary")


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


class CkptfsDaemon:
    def __init__(self, backing, mnt, options=(), log_file=None, exit_timeout=300, nofile=None):
        """nofile: run the daemon with RLIMIT_NOFILE (soft and hard) set to this."""
        self.nofile = nofile
        self.backing = os.path.realpath(backing)
        self.mnt = os.path.realpath(mnt)
        self.options = list(options)
        self.log_file = log_file or os.path.join(os.path.dirname(self.mnt),
                                                 os.path.basename(self.mnt) + ".ckptfs.log")
        self.exit_timeout = exit_timeout
        self.proc = None
        self.returncode = None
        self.last_status = None

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
        return self.proc.pid

    def start(self, timeout=30):
        # auto_unmount: should the test or bench be killed, its daemon dies with it and
        # fusermount3 removes the mount.
        opts = ",".join(["log_file=" + self.log_file, "auto_unmount"] + self.options)
        self._out = open(self.log_file + ".stderr", "ab")
        limit = None
        if self.nofile:
            limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))
        self.proc = subprocess.Popen([ckptfs_bin(), self.backing, self.mnt, "-f", "-o", opts],
                                     stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._out,
                                     preexec_fn=limit)
        deadline = time.monotonic() + timeout
        while not mounted(self.mnt):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ckptfs exited with {self.proc.returncode} before mounting:\n"
                                   + self.output())
            if time.monotonic() > deadline:
                raise RuntimeError(f"ckptfs did not mount within {timeout}s:\n" + self.output())
            time.sleep(0.02)

    def sync(self, timeout=600):
        """`ckptfs sync MNT`; raises with its output when it fails."""
        r = subprocess.run([ckptfs_bin(), "sync", self.mnt], capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError(f"ckptfs sync failed ({r.returncode}): {r.stdout}{r.stderr}")

    def stats(self):
        with open(os.path.join(self.mnt, ".ckptfs", "stats")) as f:
            return json.load(f)

    def io(self):
        return proc_io(self.pid)

    def vm_hwm_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0

    def cpu_seconds(self):
        """User plus system CPU time the daemon has used so far (all its threads)."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def unmount(self):
        """fusermount3 -u, then waits for the daemon to flush and exit; returns its exit code."""
        if self.proc is None:
            return self.returncode
        if mounted(self.mnt):
            r = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True, text=True,
                               timeout=60)
            if r.returncode != 0 and mounted(self.mnt):
                raise RuntimeError(f"fusermount3 -u {self.mnt} failed: {r.stderr.strip()}")
        if self._reap():
            raise RuntimeError(f"ckptfs did not exit within {self.exit_timeout}s after unmount; "
                               "killed it\n" + self.output()[-4000:])
        return self.returncode

    def _reap(self):
        """Waits for the daemon to exit, killing it (only this pid) after exit_timeout; returns
        whether it had to be killed."""
        killed = False
        try:
            self.returncode = self.proc.wait(timeout=self.exit_timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.returncode = self.proc.wait()
            killed = True
        self.proc = None
        self._out.close()
        return killed

    def cleanup(self):
        """Unmounts and reaps the daemon, whatever state things are in. Never raises."""
        try:
            if mounted(self.mnt):
                force_unmount(self.mnt)
            if self.proc is not None:
                self._reap()
        except Exception:
            pass

    def output(self):
        text = ""
        for p in (self.log_file, self.log_file + ".stderr"):
            try:
                with open(p, errors="replace") as f:
                    text += f.read()
            except FileNotFoundError:
                pass
        return text

    def error_lines(self):
        return error_lines(self.output())


# A daemon's error log lines, and the reports of sanitizers built into it.
ERROR_LINE = re.compile(r"\[(error|critical)\]|(ERROR|WARNING): \w+Sanitizer|runtime error:",
                        re.IGNORECASE)


def error_lines(text):
    return [line for line in text.splitlines() if ERROR_LINE.search(line)]


def snapshot(root, skip_root=(".ckptfs",)):
    """{relative path: description} of the tree under root: files ("f", mode, size, sha256),
    directories ("d", mode), symlinks ("l", target). Reads every byte."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = sorted(d for d in dirnames if d not in skip_root)
            filenames = [f for f in filenames if f not in skip_root]
        for name in sorted(dirnames) + sorted(filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", oct(stat.S_IMODE(st.st_mode)))
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    while True:
                        b = f.read(8 << 20)
                        if not b:
                            break
                        h.update(b)
                out[rel] = ("f", oct(stat.S_IMODE(st.st_mode)), st.st_size, h.hexdigest())
            else:
                out[rel] = ("?", st.st_mode)
    return out


def describe_tree_diff(a, b, name_a="expected", name_b="actual", limit=40):
    """The differences between two trees ({relative path: description}, as snapshot() or the
    mount harness's walk_tree() make them), one line each, at most `limit` lines."""
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
