"""Many processes at once on shared files: create, read-modify-write (rewrite with O_TRUNC,
append with O_APPEND, or a private temp file renamed over the name), rename over each other's
files, truncate, unlink, read, fsync and `ckptfs sync` (after which BACKING must hold the current
version of a file whose lock the syncing process holds).

Every operation on shared names holds POSIX fcntl locks (one byte of the file `locks` on the
mount per name, taken in index order) and, under them, takes a sequence number from the file
`seq` on the mount (itself a read-modify-write under its own lock byte). Each process logs its
operations with their sequence numbers and what they observed (read contents, errors) outside the
mount; replaying the merged log in sequence order on a model must reproduce every observation,
the final tree through the mount, and (after `ckptfs sync`) BACKING.

Seeded: the seed is printed; CKPTFS_CONCURRENCY_SEED=N replays the operation choices (the
interleaving is up to the scheduler). ConcurrencyTest, the default run: 6 processes x 1000
operations. ConcurrencyLongTest, the long variant, runs only with CKPTFS_LONG_TESTS=1: 8
processes x 10000 operations; without it, it is reported as skipped.
"""

import fcntl
import json
import multiprocessing
import os
import random
import subprocess
import sys
import time
import traceback
import unittest

from ckptfs_testing.harness import (CkptfsMount, choose_seed, ckptfs_bin, describe_tree_diff,
                                    errno_name, require_fuse, require_long, run_processes,
                                    snapshot)

NAMES = [f"{d}/f{i}" for d in ("a", "b") for i in range(5)]
SEQ_BYTE = len(NAMES)  # The lock byte of the `seq` file.
SEQ_WIDTH = 20
DIRS = ("a", "b", "tmp")


def record(proc, seq):
    return f"<{proc}:{seq}>\n".encode()


class Worker:
    def __init__(self, mnt, backing, proc, seed, log):
        self.mnt, self.backing, self.proc, self.log = mnt, backing, proc, log
        self.rng = random.Random(seed * 1000 + proc)
        self.lock_fd = os.open(os.path.join(mnt, "locks"), os.O_RDWR)
        self.tmp_count = 0

    def p(self, name):
        return os.path.join(self.mnt, name)

    def lock(self, index, shared=False):
        fcntl.lockf(self.lock_fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, 1, index)

    def unlock(self, index):
        fcntl.lockf(self.lock_fd, fcntl.LOCK_UN, 1, index)

    def next_seq(self):
        self.lock(SEQ_BYTE)
        try:
            fd = os.open(self.p("seq"), os.O_RDWR)
            try:
                seq = int(os.pread(fd, SEQ_WIDTH, 0)) + 1
                os.pwrite(fd, b"%*d" % (SEQ_WIDTH, seq), 0)
            finally:
                os.close(fd)
        finally:
            self.unlock(SEQ_BYTE)
        return seq

    def locked(self, names, op, fn, shared=False):
        """Runs fn(seq) under the locks of `names` with a fresh sequence number; logs
        {seq, op, names, result} where result is fn's return value or the errno name."""
        indexes = sorted({NAMES.index(n) for n in names})
        for i in indexes:
            self.lock(i, shared)
        try:
            seq = self.next_seq()
            try:
                result = fn(seq)
            except OSError as e:
                result = "error " + errno_name(e)
            self.log.write(json.dumps({"seq": seq, "proc": self.proc, "op": op, "names": names,
                                       "result": result}) + "\n")
        finally:
            for i in reversed(indexes):
                self.unlock(i)

    def read(self, name):
        with open(self.p(name), "rb") as f:
            return f.read()

    def read_or_empty(self, name):
        try:
            return self.read(name)
        except FileNotFoundError:
            return b""

    def write_file(self, path, data, flags=os.O_TRUNC):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if self.rng.random() < 0.1:
                os.fsync(fd)
        finally:
            os.close(fd)

    # Each operation returns what the model must reproduce: contents read (as text), or None.
    def op_rmw(self, name):
        how = self.rng.choice(["trunc", "append", "rename"])

        def fn(seq):
            old = self.read_or_empty(name)
            rec = record(self.proc, seq)
            if how == "trunc":
                self.write_file(self.p(name), old + rec)
            elif how == "append":
                self.write_file(self.p(name), rec, os.O_APPEND)
            else:
                self.tmp_count += 1
                tmp = self.p(f"tmp/p{self.proc}.{self.tmp_count}")
                self.write_file(tmp, old + rec)
                os.rename(tmp, self.p(name))
            return old.decode()
        self.locked([name], "rmw", fn)

    def op_truncate(self, name):
        size = self.rng.randrange(0, 400)
        self.locked([name], f"truncate {size}", lambda seq: os.truncate(self.p(name), size))

    def op_rename(self, src, dst):
        self.locked([src, dst], "rename", lambda seq: os.rename(self.p(src), self.p(dst)))

    def op_unlink(self, name):
        self.locked([name], "unlink", lambda seq: os.unlink(self.p(name)))

    def op_read(self, name):
        self.locked([name], "read", lambda seq: self.read(name).decode(), shared=True)

    def op_sync(self, name):
        """`ckptfs sync` under the lock of name: then BACKING holds name's current version."""
        def fn(seq):
            r = subprocess.run([ckptfs_bin(), "sync", self.mnt], capture_output=True, text=True,
                               timeout=120, stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                raise AssertionError(f"ckptfs sync failed ({r.returncode}): {r.stderr.strip()}")
            with open(os.path.join(self.backing, name), "rb") as f:
                return f.read().decode()
        self.locked([name], "sync", fn)

    def run(self, nops):
        for _ in range(nops):
            x = self.rng.random()
            name = self.rng.choice(NAMES)
            if x < 0.40:
                self.op_rmw(name)
            elif x < 0.50:
                self.op_truncate(name)
            elif x < 0.65:
                self.op_rename(name, self.rng.choice([n for n in NAMES if n != name]))
            elif x < 0.70:
                self.op_unlink(name)
            elif x < 0.98:
                self.op_read(name)
            else:
                self.op_sync(name)


def worker_main(mnt, backing, proc, seed, nops, log_path, results):
    try:
        with open(log_path, "w") as log:
            Worker(mnt, backing, proc, seed, log).run(nops)
        results.put((proc, None))
    except BaseException:
        results.put((proc, traceback.format_exc()))


def replay(entries):
    """Applies the logged operations in sequence order to a model {name: bytes}; returns
    (model, [observations that differ])."""
    model = {}
    wrong = []
    for e in entries:
        op, names, got = e["op"], e["names"], e["result"]
        name = names[0]
        want = None
        if op == "rmw":
            want = model.get(name, b"").decode()
            model[name] = model.get(name, b"") + record(e["proc"], e["seq"])
        elif name not in model:
            want = "error ENOENT"
        elif op in ("read", "sync"):
            want = model[name].decode()
        elif op.startswith("truncate "):
            size = int(op.split()[1])
            model[name] = model[name][:size].ljust(size, b"\0")
        elif op == "rename":
            model[names[1]] = model.pop(name)
        elif op == "unlink":
            del model[name]
        if got != want:
            wrong.append(f"seq {e['seq']} (process {e['proc']}) {op} {names}: "
                         f"got {got!r:.200}, the model says {want!r:.200}")
    return model, wrong


def expected_tree(model, seq):
    tree = {d: ("d", "0o755") for d in DIRS}
    tree["locks"] = ("f", "0o644", 0, b"")
    tree["seq"] = ("f", "0o644", SEQ_WIDTH, b"%*d" % (SEQ_WIDTH, seq))
    for name, data in model.items():
        tree[name] = ("f", "0o644", len(data), data)
    return tree


class ConcurrentRun(unittest.TestCase):
    maxDiff = 4000

    def run_processes(self, nprocs, nops, timeout):
        require_fuse()
        seed = choose_seed("CKPTFS_CONCURRENCY_SEED", "concurrency")
        ctx = multiprocessing.get_context("fork")
        with CkptfsMount(options=["flush_delay=10ms"]) as m:
            for d in DIRS:
                os.mkdir(m.path(d), 0o755)
            with open(m.path("locks"), "wb"):
                pass
            with open(m.path("seq"), "wb") as f:
                f.write(b"%*d" % (SEQ_WIDTH, 0))
            results = ctx.Queue()
            logs = [os.path.join(m.workdir, f"ops{i}.jsonl") for i in range(nprocs)]
            procs = [ctx.Process(target=worker_main,
                                 args=(m.mnt, m.backing, i, seed, nops, logs[i], results))
                     for i in range(nprocs)]
            t0 = time.monotonic()
            done = run_processes(procs, results, timeout, describe=lambda: f"seed {seed}, "
                                 f"stats: {m.stats()}")
            elapsed = time.monotonic() - t0
            failures = [f"process {proc}:\n{err}" for proc, err in done if err]
            self.assertFalse(failures, f"seed {seed}: " + "\n".join(failures))
            entries = []
            for path in logs:
                with open(path) as f:
                    entries += [json.loads(line) for line in f]
            entries.sort(key=lambda e: e["seq"])
            seqs = [e["seq"] for e in entries]
            self.assertEqual(seqs, list(range(1, len(entries) + 1)),
                             f"seed {seed}: sequence numbers taken under the lock are not unique "
                             "and dense: the lock or the seq file's read-modify-write broke")
            model, wrong = replay(entries)
            print(f"\n{nprocs} processes x {nops} operations in {elapsed:.1f}s, "
                  f"{len(model)} files at the end", file=sys.stderr)
            self.assertFalse(wrong, f"seed {seed}: observations differ from the model replaying "
                                    "the log in sequence order:\n" + "\n".join(wrong[:10]))
            want = expected_tree(model, len(entries))
            for where, root in (("mount", m.mnt), ("BACKING after sync", m.backing)):
                if root == m.backing:
                    m.sync()
                got = snapshot(root, contents="bytes")
                self.assertEqual(want, got, f"seed {seed}: {where} differs from the model:\n"
                                 + describe_tree_diff(want, got, "model", where))
            self.assertEqual(m.unmount(), 0)
            self.assertEqual(snapshot(m.backing, contents="bytes"), want,
                             f"seed {seed}: BACKING after unmount")


class ConcurrencyTest(ConcurrentRun):
    def test_six_processes(self):
        self.run_processes(6, 1000, timeout=120)


class ConcurrencyLongTest(ConcurrentRun):
    """The long variant: only with CKPTFS_LONG_TESTS=1."""

    def test_eight_processes(self):
        require_long()
        self.run_processes(8, 10000, timeout=900)


if __name__ == "__main__":
    unittest.main()
