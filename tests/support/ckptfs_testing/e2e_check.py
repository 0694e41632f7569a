"""The check every e2e test makes: run a workload on a plain directory and through ckptfs, and
compare.

1. The workload runs on a plain directory on the same disk; its tree (names, modes, sizes,
   sha256) is what the backing directory must end up holding. Files the library does not write
   deterministically (the workload's `varying` names, e.g. DCP's .metadata with its random save
   id) are compared by name, mode and size; the plain directory's path has the mount point's
   length, so that a file recording its own path has the same size.
2. A fresh ckptfs mounts over an empty backing directory; the workload runs under the mount.
3. Through the mount: the tree is identical, and the workload's loader reads back exactly the
   generated data. When it is not, a second plain run decides: a library that writes a file
   differently from one run to the next (seen once for DCP) is told from ckptfs changing bytes,
   and the differing byte ranges are printed. Zarr arrays served with a fine chunk grid show other chunk files through the
   mount (the loader's read-back checks them), and the lock files of zarr's ProcessSynchronizer
   next to them are named by those chunks: neither is compared file by file.
4. After `ckptfs sync`: the backing directory (minus BACKING/.ckptfs) holds exactly that tree and
   the daemon reports nothing dirty or pending; every file in it carries a checksum record whose
   sums equal PyPI crc32c's of its bytes (checksums.py).
5. After unmount: the daemon exits 0, the backing tree is still exactly that, nothing is left in
   BACKING/.ckptfs/staging, no rescue directory, no error in the daemon's log.
6. A new mount over the same backing directory (cold: nothing staged) reads it all back.
"""

import os
import shutil
import tempfile
import threading
import time
import unittest

from .checksums import mismatched_records
from .ckptfs_daemon import CkptfsDaemon, describe_tree_diff, mounted, snapshot

E2E_TMP = os.environ.get("CKPTFS_E2E_TMP", "/var/tmp")


def require_fuse():
    if not os.path.exists("/dev/fuse"):
        raise unittest.SkipTest("/dev/fuse is absent: FUSE e2e tests cannot run here")


class Timer:
    def __init__(self):
        self.marks = []
        self.t = time.monotonic()

    def mark(self, what):
        now = time.monotonic()
        self.marks.append(f"{what} {now - self.t:.1f}s")
        self.t = now

    def __str__(self):
        return ", ".join(self.marks)


def remove_tmp(tmp):
    if os.environ.get("CKPTFS_E2E_KEEP"):
        print(f"kept {tmp}")
    elif not mounted(os.path.join(tmp, "mount")):
        shutil.rmtree(tmp, ignore_errors=True)


def _without(tree, dirs):
    """`tree` without the entries below any directory in `dirs` (the directories stay)."""
    return {k: v for k, v in tree.items() if not any(k.startswith(d + os.sep) for d in dirs)}


def comparable(tree, varying):
    """`tree` with the contents of files named in `varying` left out of the comparison."""
    return {k: (v[:3] + ("(varies)",) if v[0] == "f" and os.path.basename(k) in varying else v)
            for k, v in tree.items()}


def _byte_differences(a, b):
    """Where files a and b differ: "N bytes differ, the first at X, the last at Y"."""
    import numpy as np
    x, y = np.fromfile(a, dtype=np.uint8), np.fromfile(b, dtype=np.uint8)
    if len(x) != len(y):
        return f"sizes {len(x)} and {len(y)}"
    at = np.flatnonzero(x != y)
    return f"{len(at)} bytes differ, the first at {at[0]}, the last at {at[-1]}" if len(at) else "same"


def _plain_run_agreeing_with(tc, w, tmp, tree, expected, through, hidden):
    """When the tree through the mount differs from the plain run (tmp/plain, still there), a
    second plain run (tmp/again) tells a library that writes a file differently from one run to
    the next from ckptfs changing bytes: the test goes on with the second run's tree when ckptfs
    agrees with it, and fails otherwise. Either way the differing byte ranges are printed."""
    plain, again, mnt = (os.path.join(tmp, n) for n in ("plain", "again", "mount"))
    os.mkdir(again)
    w.save(again)
    rerun = tree(again)
    report = ["tree read through the mount differs from the plain run:",
              describe_tree_diff(_without(expected, hidden), through, "plain", "ckptfs")]
    for k in sorted(k for k in through if k in expected and expected[k] != through[k]):
        if through[k][0] == "f":
            report.append(f"{k}: plain and ckptfs: "
                          f"{_byte_differences(os.path.join(plain, k), os.path.join(mnt, k))}; "
                          f"plain and a second plain run: "
                          f"{_byte_differences(os.path.join(plain, k), os.path.join(again, k))}")
    shutil.rmtree(again)
    agrees = _without(rerun, hidden) == through
    report.append("a second plain run agrees with ckptfs: the library wrote differently from one "
                  "run to the next" if agrees else "a second plain run does not agree with ckptfs")
    print("\n".join(report), flush=True)
    if not agrees:
        tc.fail("\n".join(report))
    return rerun


def mount_in(tc, tmp, options=("cache_size=1G",), nofile=None):
    """A ckptfs daemon mounted on tmp/mount over an empty tmp/backing, unmounted when the test
    ends: (daemon, backing, mount point)."""
    backing, mnt = os.path.join(tmp, "backing"), os.path.join(tmp, "mount")
    os.mkdir(backing)
    os.mkdir(mnt)
    d = CkptfsDaemon(backing, mnt, options, log_file=os.path.join(tmp, "daemon.log"), nofile=nofile)
    tc.addCleanup(d.cleanup)
    d.start()
    return d, backing, mnt


def fresh_mount(tc, prefix, options=("cache_size=1G",)):
    """mount_in a new temporary directory, removed when the test ends."""
    require_fuse()
    tmp = tempfile.mkdtemp(prefix=prefix, dir=E2E_TMP)
    tc.addCleanup(remove_tmp, tmp)
    return mount_in(tc, tmp, options)


def check_workload(tc, w, options=("cache_size=1G",), nofile=None, loads=None,
                   while_saving=None, synced=None, after_sync=None):
    """Runs the whole check (module docstring) for workload w in test case tc, reading back with
    each of `loads` (default: w.load). while_saving(daemon, saving), when given, runs in a thread
    during the save through the mount; `saving` (a threading.Event) is cleared once the save has
    returned. synced(stats), when given, is called with the daemon's stats after `ckptfs sync`,
    then after_sync(daemon, backing). Returns the daemon's stats after the save."""
    loads = loads or (w.load,)
    require_fuse()

    def tree(root):
        return comparable(snapshot(root), w.varying)
    tmp = tempfile.mkdtemp(prefix=f"ckptfs-e2e-{w.name}-", dir=E2E_TMP)
    # Cleanups run last-registered first: the daemon is unmounted before the temp dir goes, and
    # the temp dir is only removed when nothing is mounted under it.
    tc.addCleanup(remove_tmp, tmp)
    timer = Timer()
    plain = os.path.join(tmp, "plain")  # As long as "mount".
    os.mkdir(plain)
    w.save(plain)
    expected = tree(plain)
    tc.assertTrue(expected, "the workload wrote nothing")
    timer.mark("plain")

    d, backing, mnt = mount_in(tc, tmp, options, nofile)
    if while_saving:
        saving = threading.Event()
        saving.set()
        failures = []

        def run():
            try:
                while_saving(d, saving)
            except BaseException as e:  # Reported by the test's thread.
                failures.append(e)
        beside = threading.Thread(target=run)
        beside.start()
        try:
            w.save(mnt)
        finally:
            saving.clear()
            beside.join()
        if failures:
            raise failures[0]
    else:
        w.save(mnt)
    timer.mark("save via mount")
    saved_stats = d.stats()
    fine = [a["path"] for a in saved_stats["zarr_fine_grid"]]
    locks = [path + ".sync" for path in fine]
    expected_through = _without(expected, fine + locks)
    through = _without(tree(mnt), fine + locks)
    if through != expected_through:
        expected = _plain_run_agreeing_with(tc, w, tmp, tree, expected, through, fine + locks)
        expected_through = _without(expected, fine + locks)
    shutil.rmtree(plain)
    for load in loads:
        tc.assertEqual(load(mnt), w.expected_digest(), f"{load.__name__} read back different data")
    timer.mark("read back")

    d.sync()
    stats = d.stats()
    for key in ("flush_errors", "dirty_bytes", "pending_entries"):
        tc.assertIn(key, stats)
        tc.assertEqual(stats[key], 0, f"{key} after ckptfs sync: {stats}")
    if synced:
        synced(stats)
    if after_sync:
        after_sync(d, backing)
    tc.assertEqual(mismatched_records(backing), {},
                   "published files whose checksum records are missing or wrong")
    expected = _without(expected, locks)
    after_sync = _without(tree(backing), locks)
    tc.assertEqual(expected, after_sync,
                   "backing dir after `ckptfs sync` differs from the plain run:\n"
                   + describe_tree_diff(expected, after_sync, "plain", "ckptfs"))
    timer.mark("sync")

    rc = d.unmount()
    tc.assertEqual(rc, 0, "daemon exit code after unmount\n" + d.output()[-3000:])
    after_unmount = _without(tree(backing), locks)
    tc.assertEqual(expected, after_unmount,
                   "backing dir after unmount differs from the plain run:\n"
                   + describe_tree_diff(expected, after_unmount, "plain", "ckptfs"))
    own = os.path.join(backing, ".ckptfs")
    if os.path.isdir(own):
        leftovers = [n for n in os.listdir(own) if n != "staging"]
        tc.assertEqual(leftovers, [], f"unexpected entries in {own}")
        staging = os.path.join(own, "staging")
        if os.path.isdir(staging):
            tc.assertEqual(os.listdir(staging), [], "files left in BACKING/.ckptfs/staging")
    tc.assertEqual(d.error_lines(), [], "the daemon logged errors")
    timer.mark("unmount")

    d2 = CkptfsDaemon(backing, mnt, options, log_file=os.path.join(tmp, "daemon2.log"),
                      nofile=nofile)
    tc.addCleanup(d2.cleanup)
    d2.start()
    for load in loads:
        tc.assertEqual(load(mnt), w.expected_digest(),
                       f"{load.__name__} read back different data (remount)")
    cold = _without(tree(mnt), fine + locks)
    tc.assertEqual(expected_through, cold, "tree through a fresh mount differs:\n"
                   + describe_tree_diff(expected_through, cold, "plain", "ckptfs"))
    tc.assertEqual(d2.unmount(), 0, d2.output()[-3000:])
    tc.assertEqual(_without(tree(backing), locks), expected,
                   "a read-only remount changed the backing dir")
    tc.assertEqual(d2.error_lines(), [], "the daemon logged errors (remount)")
    timer.mark("remount+load")
    print(f"\n[{w.name}] {w.logical_bytes() / 2**20:.0f} MiB, {len(expected)} entries: {timer}",
          flush=True)
    return saved_stats
