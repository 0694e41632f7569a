"""Randomized differential test: seeded sequences of file operations applied side by side to the
mount and to a plain temp directory must give the same results.

Operations: open/create (O_TRUNC, O_APPEND, O_EXCL, read-only, ...), write and pwrite at random
offsets (holes), read and pread, lseek, ftruncate/truncate up and down, rename (over files and
directories), unlink (the open descriptors stay in use), mmap read, mmap write + msync, fsync,
mkdir/rmdir, symlink/readlink, link, chmod, stat/lstat/fstat, listdir, mkfifo/mknod (FIFOs,
sockets, device nodes, files), and a write or truncation of a set-user-ID file by uid 65534.
After every step the results (return values, errno) must be equal; every TREE_EVERY steps the
whole trees (names, types, modes, sizes, bytes, link counts, symlink targets, device numbers).
At the end: the trees after closing everything, BACKING after `ckptfs sync`, BACKING after
unmount, and a new mount over BACKING.

Every open is O_NONBLOCK, so that a FIFO never blocks the test (regular files ignore it). Device
nodes are not opened: the mount is nodev (FUSE's default), a plain directory is not.

A failure names the seed, the step and the last operations; CKPTFS_DIFF_SEED=N replays one seed.
DifferentialTest, the default run: 5 seeds x 800 steps. DifferentialLongTest, the long variant,
runs only with CKPTFS_LONG_TESTS=1: 40 seeds x 3000 steps; without it, it is reported as skipped.
"""

import mmap
import os
import pickle
import random
import shutil
import stat
import sys
import tempfile
import unittest

from ckptfs_testing.harness import (CkptfsMount, choose_seed, describe_tree_diff, errno_name,
                                    require_fuse, require_long, snapshot)

NOBODY = 65534
ROOT = os.geteuid() == 0  # Device nodes and changes by uid 65534 need root.
TREE_EVERY = 25
MAX_HANDLES = 8
DIRS = ["", "d1", "d1/d2", "d3"]  # Made at the start; they can be renamed and removed.
FILES = ["f0", "f1", "f2", "f3", "l0"]
SUBDIRS = ["d1", "d2", "d3"]
OPEN_FLAGS = [
    ("O_RDWR|O_CREAT", os.O_RDWR | os.O_CREAT),
    ("O_RDWR|O_CREAT|O_TRUNC", os.O_RDWR | os.O_CREAT | os.O_TRUNC),
    ("O_WRONLY|O_CREAT|O_APPEND", os.O_WRONLY | os.O_CREAT | os.O_APPEND),
    ("O_RDWR|O_APPEND", os.O_RDWR | os.O_APPEND),
    ("O_RDWR|O_CREAT|O_EXCL", os.O_RDWR | os.O_CREAT | os.O_EXCL),
    ("O_RDONLY", os.O_RDONLY),
    ("O_WRONLY|O_TRUNC", os.O_WRONLY | os.O_TRUNC),
    ("O_RDWR", os.O_RDWR),
]


def describe_stat(st):
    kind = stat.S_IFMT(st.st_mode)
    size = None if stat.S_ISDIR(st.st_mode) else st.st_size  # Directory sizes are fs-specific.
    return (kind, oct(stat.S_IMODE(st.st_mode)), size, st.st_nlink, st.st_rdev)


def is_device(path):
    """Whether path leads to a device node (never opened here: see the module's doc)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)


def as_nobody(fn):
    """fn() run by a forked child as uid/gid 65534: what it returned, or the errno it failed
    with."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            try:
                out = fn()
            except OSError as e:
                out = "error " + errno_name(e)
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data) if data else "the child failed"


def mappable_size(fd):
    """The size to mmap of a regular file, or why not (directory sizes are fs-specific)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    return st.st_size or "empty"


class Side:
    """One of the two trees: its root and its open descriptors (handle id -> fd)."""

    def __init__(self, name, root):
        self.name, self.root, self.fds = name, root, {}

    def p(self, rel):
        return os.path.join(self.root, rel)

    def close_all(self):
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()


class Differential:
    def __init__(self, tc, seed, mnt, plain):
        self.tc, self.seed = tc, seed
        self.rng = random.Random(seed)
        self.sides = [Side("mount", mnt), Side("plain", plain)]
        self.handles = {}  # handle id -> description
        self.next_handle = 0
        self.history = []

    # --- random parameters --------------------------------------------------------------------

    def path(self, dir_share=0.15):
        """A path in one of DIRS; its last part names a directory with probability dir_share."""
        leaf = self.rng.choice(SUBDIRS if self.rng.random() < dir_share else FILES)
        return os.path.join(self.rng.choice(DIRS), leaf)

    def data(self):
        n = self.rng.choice([1, 7, 100, 4096, 5000, 65536, 200_000])
        n = self.rng.randint(1, n)
        return self.rng.randbytes(n)

    def offset(self):
        x = self.rng.random()
        if x < 0.5:
            return self.rng.randrange(0, 70_000)
        if x < 0.9:
            return self.rng.randrange(0, 1 << 20)
        return self.rng.randrange(0, 4 << 20)  # A large hole.

    def size(self):
        return self.rng.choice([0, 1, 4095, 4096, 10_000, 65_537, self.rng.randrange(0, 3 << 20)])

    def handle(self):
        return self.rng.choice(sorted(self.handles)) if self.handles else None

    # --- operations: each returns (description, fn(side) -> result) ---------------------------

    def gen_open(self):
        if len(self.handles) >= MAX_HANDLES:
            return self.gen_close()
        path = self.path()
        label, flags = self.rng.choice(OPEN_FLAGS)
        mode = self.rng.choice([0o644, 0o600, 0o755])
        hid = self.next_handle
        self.next_handle += 1

        def fn(side):
            if is_device(side.p(path)):
                return "a device node"
            side.fds[hid] = os.open(side.p(path), flags | os.O_NONBLOCK, mode)
            return "opened"
        self.handles[hid] = f"{path} {label}"  # Removed again in step() when the open failed.
        return f"h{hid} = open({path!r}, {label}, {oct(mode)})", fn, hid

    def gen_close(self):
        hid = self.handle()
        if hid is None:
            return self.gen_open()
        del self.handles[hid]

        def fn(side):
            os.close(side.fds.pop(hid))
        return f"close(h{hid})", fn

    def fd_op(self, label, op):
        """An operation on an open handle: op(fd) on each side."""
        hid = self.handle()
        if hid is None:
            return self.gen_open()
        return f"{label.replace('FD', f'h{hid}')}", lambda side: op(side.fds[hid])

    def gen_pwrite(self):
        data, off = self.data(), self.offset()
        return self.fd_op(f"pwrite(FD, <{len(data)} bytes>, {off})",
                          lambda fd: os.pwrite(fd, data, off))

    def gen_write(self):
        data = self.data()
        return self.fd_op(f"write(FD, <{len(data)} bytes>)", lambda fd: os.write(fd, data))

    def gen_pread(self):
        n, off = self.rng.choice([1, 100, 4096, 70_000, 1 << 20]), self.offset()
        return self.fd_op(f"pread(FD, {n}, {off})", lambda fd: os.pread(fd, n, off))

    def gen_read(self):
        n = self.rng.choice([1, 100, 4096, 70_000])
        return self.fd_op(f"read(FD, {n})", lambda fd: os.read(fd, n))

    def gen_lseek(self):
        whence = self.rng.choice([os.SEEK_SET, os.SEEK_CUR, os.SEEK_END])
        off = self.rng.randrange(-5000, 100_000) if whence != os.SEEK_SET else self.offset()

        def op(fd):
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return "not a regular file"  # Seeking in directories is fs-specific.
            return os.lseek(fd, off, whence)
        return self.fd_op(f"lseek(FD, {off}, {whence})", op)

    def gen_ftruncate(self):
        size = self.size()
        return self.fd_op(f"ftruncate(FD, {size})", lambda fd: os.ftruncate(fd, size))

    def gen_fstat(self):
        return self.fd_op("fstat(FD)", lambda fd: describe_stat(os.fstat(fd)))

    def gen_fsync(self):
        return self.fd_op("fsync(FD)", os.fsync)

    def gen_mmap_read(self):
        a, b = sorted((self.rng.random(), self.rng.random()))

        def op(fd):
            size = mappable_size(fd)
            if not isinstance(size, int):
                return size
            with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
                return mm[int(a * size):int(b * size) + 1]
        return self.fd_op(f"mmap read(FD, [{a:.3f}, {b:.3f}] of the size)", op)

    def gen_mmap_write(self):
        a = self.rng.random()
        data = self.data()[:20_000]

        def op(fd):
            size = mappable_size(fd)
            if not isinstance(size, int):
                return size
            start = int(a * size)
            chunk = data[:size - start]
            with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
                mm[start:start + len(chunk)] = chunk
                mm.flush()  # msync(MS_SYNC)
            return len(chunk)
        return self.fd_op(f"mmap write+msync(FD, at {a:.3f} of the size, <{len(data)} bytes>)", op)

    def gen_truncate(self):
        path, size = self.path(), self.size()
        return f"truncate({path!r}, {size})", lambda side: os.truncate(side.p(path), size)

    def gen_stat(self):
        path = self.path()
        fn = self.rng.choice([os.stat, os.lstat])
        return f"{fn.__name__}({path!r})", lambda side: describe_stat(fn(side.p(path)))

    def gen_rename(self):
        a, b = self.path(dir_share=0.25), self.path(dir_share=0.25)
        return f"rename({a!r}, {b!r})", lambda side: os.rename(side.p(a), side.p(b))

    def gen_link(self):
        a, b = self.path(), self.path()
        return f"link({a!r}, {b!r})", lambda side: os.link(side.p(a), side.p(b))

    def gen_unlink(self):
        path = self.path()
        return f"unlink({path!r})", lambda side: os.unlink(side.p(path))

    def gen_mkdir(self):
        path = self.path(dir_share=0.7)
        return f"mkdir({path!r})", lambda side: os.mkdir(side.p(path), 0o755)

    def gen_rmdir(self):
        path = self.path(dir_share=0.7)
        return f"rmdir({path!r})", lambda side: os.rmdir(side.p(path))

    def gen_symlink(self):
        path = self.path()
        # Targets never climb with "..": renames move links, and none may point out of the tree.
        target = self.rng.choice(["f0", "f1", "d1/f3", "d1/d2", "nowhere", "d3", "l0"])
        return (f"symlink({target!r}, {path!r})",
                lambda side: os.symlink(target, side.p(path)))

    def gen_readlink(self):
        path = self.path()
        return f"readlink({path!r})", lambda side: os.readlink(side.p(path))

    def gen_chmod(self):
        path, mode = self.path(), self.rng.choice([0o600, 0o644, 0o640, 0o755, 0o700])
        return f"chmod({path!r}, {oct(mode)})", lambda side: os.chmod(side.p(path), mode)

    def gen_mknod(self):
        path, mode = self.path(), self.rng.choice([0o644, 0o600, 0o640])
        kind = self.rng.choice(["fifo", "socket", "device", "file"] if ROOT else
                               ["fifo", "socket", "file"])
        if kind == "fifo":
            return f"mkfifo({path!r}, {oct(mode)})", lambda side: os.mkfifo(side.p(path), mode)
        mode |= {"socket": stat.S_IFSOCK, "device": stat.S_IFCHR, "file": stat.S_IFREG}[kind]
        dev = os.makedev(1, 3) if kind == "device" else 0
        return (f"mknod({path!r}, {kind} {oct(mode)})",
                lambda side: os.mknod(side.p(path), mode, dev))

    def gen_setid_write(self):
        """chmod of a regular file to a set-ID mode, then a change of it by uid 65534 (who may
        write it unless the mode is 0o4755): its result and the mode after."""
        if not ROOT:
            return self.gen_chmod()
        path = self.path()
        mode = self.rng.choice([0o4777, 0o6777, 0o2777, 0o4755])
        how = self.rng.choice(["O_WRONLY", "O_RDWR", "O_WRONLY|O_TRUNC", "truncate"])
        data, off = self.data()[:10_000], self.offset()

        def change(p):
            if how == "truncate":
                return os.truncate(p, off)
            flags = {"O_WRONLY": os.O_WRONLY, "O_RDWR": os.O_RDWR,
                     "O_WRONLY|O_TRUNC": os.O_WRONLY | os.O_TRUNC}[how]
            fd = os.open(p, flags | os.O_NONBLOCK)
            try:
                return None if "TRUNC" in how else os.pwrite(fd, data, off)
            finally:
                os.close(fd)

        def fn(side):
            p = side.p(path)
            if not stat.S_ISREG(os.stat(p).st_mode):
                return "not a regular file"
            os.chmod(p, mode)
            return as_nobody(lambda: change(p)), oct(stat.S_IMODE(os.stat(p).st_mode))
        return (f"chmod({path!r}, {oct(mode)}); as uid {NOBODY}: {how} "
                f"(<{len(data)} bytes> at {off})", fn)

    def gen_listdir(self):
        path = self.rng.choice(DIRS)
        return f"listdir({path!r})", lambda side: sorted(os.listdir(side.p(path)))

    WEIGHTS = {"open": 12, "close": 6, "pwrite": 12, "write": 6, "pread": 8, "read": 4,
               "lseek": 3, "ftruncate": 4, "fstat": 4, "fsync": 2, "mmap_read": 3,
               "mmap_write": 3, "truncate": 3, "stat": 4, "rename": 6, "link": 2, "unlink": 4,
               "mkdir": 3, "rmdir": 2, "symlink": 2, "readlink": 1, "chmod": 2, "listdir": 2,
               "mknod": 2, "setid_write": 2}

    # --- running and comparing ----------------------------------------------------------------

    def fail(self, what):
        recent = "\n".join(f"  {i}: {h}" for i, h in list(enumerate(self.history))[-25:])
        self.tc.fail(f"seed {self.seed} (CKPTFS_DIFF_SEED={self.seed} replays it; mount options "
                     f"{','.join(mount_options(self.seed))}), step "
                     f"{len(self.history) - 1}: {what}\nlast operations:\n{recent}")

    def step(self):
        kinds = list(self.WEIGHTS)
        kind = self.rng.choices(kinds, [self.WEIGHTS[k] for k in kinds])[0]
        gen = getattr(self, "gen_" + kind)()
        desc, fn = gen[0], gen[1]
        self.history.append(desc)
        results = []
        for side in self.sides:
            try:
                results.append(fn(side))
            except OSError as e:
                results.append("error " + errno_name(e))
        if len(gen) == 3 and results[0] != "opened":  # A failed open: no handle.
            del self.handles[gen[2]]
        if results[0] != results[1]:
            self.fail(f"{desc}: the mount gave {short(results[0])}, a plain directory "
                      f"{short(results[1])}")

    def compare_trees(self, root, where):
        want = snapshot(self.sides[1].root, contents="bytes", with_nlink=True)
        got = snapshot(root, contents="bytes", with_nlink=True)
        if want != got:
            self.fail(f"{where} differs from the plain directory:\n"
                      + describe_tree_diff(want, got, "plain", where))

    def close_all(self):
        for side in self.sides:
            side.close_all()
        self.handles.clear()

    def run(self, steps):
        for d in DIRS[1:]:
            self.history.append(f"mkdir({d!r})")
            for side in self.sides:
                os.mkdir(side.p(d), 0o755)
        for i in range(steps):
            self.step()
            if i % TREE_EVERY == TREE_EVERY - 1:
                self.compare_trees(self.sides[0].root, "the mount")
        self.history.append("close everything")
        self.close_all()
        self.compare_trees(self.sides[0].root, "the mount")


def mmap_write_on_append_descriptor(root):
    """Writes a file through an O_RDWR|O_APPEND descriptor, changes 4 bytes of it through a
    shared mapping of that descriptor, msyncs; returns (size, contents)."""
    path = os.path.join(root, "f")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, b"a" * 1942)
        with mmap.mmap(fd, 1942, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
            mm[1800:1804] = b"XXXX"
            mm.flush()
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    with open(path, "rb") as f:
        return size, f.read()


def mount_options(seed):
    """Flushing at once, soon, or late; a cache that the files do or do not fit in. Passthrough
    is off: it refuses writers while a large file is read (ETXTBSY), a documented difference
    from a plain directory. As root, allow_other: uid 65534 changes set-ID files."""
    rng = random.Random(seed)
    return [f"flush_delay={rng.choice(['0', '20ms', '2s'])}",
            f"cache_size={rng.choice(['16M', '64M'])}", "passthrough=off"] + (
                ["allow_other"] if ROOT else [])


def short(value):
    if isinstance(value, bytes) and len(value) > 40:
        return f"<{len(value)} bytes {value[:16]!r}...>"
    return repr(value)


class DifferentialRun(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def run_seeds(self, count, steps):
        env = os.environ.get("CKPTFS_DIFF_SEED")
        base = choose_seed("CKPTFS_DIFF_SEED", "differential (first)")
        for seed in [base] if env else range(base, base + count):
            with self.subTest(seed=seed):
                self.run_seed(seed, steps)

    def run_seed(self, seed, steps):
        plain = tempfile.mkdtemp(prefix="ckptfs-diff-plain-")
        self.addCleanup(shutil.rmtree, plain, True)
        os.chmod(plain, 0o755)  # Reached by uid 65534.
        with CkptfsMount(options=mount_options(seed)) as m:
            d = Differential(self, seed, m.mnt, plain)
            try:
                d.run(steps)
            finally:
                d.close_all()
            m.sync()
            d.history.append("ckptfs sync")
            d.compare_trees(m.backing, "BACKING after sync")
            self.assertEqual(m.unmount(), 0)
            d.history.append("unmount")
            d.compare_trees(m.backing, "BACKING after unmount")
            with CkptfsMount(backing=m.backing) as m2:
                d.history.append("mount again")
                d.compare_trees(m2.mnt, "a new mount over BACKING")
                self.assertEqual(m2.unmount(), 0)
        print(f"seed {seed} ({','.join(mount_options(seed))}): {steps} steps ok", file=sys.stderr)


class DifferentialTest(DifferentialRun):
    def test_mmap_write_on_append_descriptor(self):
        """Found by test_random_sequences: the kernel writes a mapping's dirty pages back through
        a writable descriptor of the file, at their own offsets, also when it was opened with
        O_APPEND; the file must not grow."""
        plain = tempfile.mkdtemp(prefix="ckptfs-diff-plain-")
        self.addCleanup(shutil.rmtree, plain, True)
        want = mmap_write_on_append_descriptor(plain)
        with CkptfsMount() as m:
            size, data = mmap_write_on_append_descriptor(m.mnt)
            self.assertEqual((size, short(data)), (want[0], short(want[1])),
                             "(size, contents) after msync: mount first, plain directory second")
            self.assertTrue(data == want[1], "contents after msync differ")
            self.assertEqual(m.unmount(), 0)

    def test_random_sequences(self):
        self.run_seeds(5, 800)


class DifferentialLongTest(DifferentialRun):
    """The long variant: only with CKPTFS_LONG_TESTS=1."""

    def test_random_sequences(self):
        require_long()
        self.run_seeds(40, 3000)


if __name__ == "__main__":
    unittest.main()
