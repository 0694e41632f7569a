"""Test 6: kill -9 the daemon while a writer closes files; BACKING must be a prefix of the close
order with no torn file under a final name, and the next mount removes leftover staging files.
Under the default options the cache's memory outlives the daemon: the next mount recovers every
file the writer closed, and BACKING is still a prefix.

Set CKPTFS_CRASH_SEED to replay a run; the seed is printed on every run.
"""

import os
import random
import subprocess
import sys
import time
import unittest

from ckptfs_testing.harness import CkptfsMount, require_fuse
from crash_writer import data_content, meta_content, parse_versioned, tracker_content

HERE = os.path.dirname(os.path.abspath(__file__))

ITERATIONS = 5
FILES_PER_RUN = 400


class CrashTest(unittest.TestCase):
    maxDiff = 2000

    def setUp(self):
        require_fuse()

    def check_run(self, backing, run, seed, closed):
        """Checks BACKING/run<k> after a crash; returns how many data files it holds."""
        d = os.path.join(backing, f"run{run}")
        ctx = f"run {run}, seed {seed}"
        if not os.path.isdir(d):
            return 0  # The mkdir itself was not flushed: the empty prefix.
        names = set(os.listdir(d))
        data = sorted(n for n in names if n.startswith("f"))
        k = len(data)
        self.assertEqual(data, [f"f{i:04d}" for i in range(k)],
                         f"{ctx}: data files in BACKING are not a prefix of the close order")
        self.assertLessEqual(k, closed + 1, f"{ctx}: more files than the writer closed")
        for i, n in enumerate(data):
            with open(os.path.join(d, n), "rb") as f:
                got = f.read()
            want = data_content(seed, i)
            self.assertTrue(got == want, f"{ctx}: {n} is torn or wrong: {len(got)} bytes, "
                                         f"expected {len(want)}")
        for name, gen, step in (("tracker", tracker_content, 4), ("tracker.tmp", tracker_content, 4),
                                ("meta", meta_content, 5)):
            if name not in names:
                continue
            with open(os.path.join(d, name), "rb") as f:
                got = f.read()
            v = parse_versioned(got)
            self.assertIsNotNone(v, f"{ctx}: {name} has torn content ({len(got)} bytes)")
            self.assertEqual(v % step, step - 1, f"{ctx}: {name} has an impossible version {v}")
            self.assertTrue(got == gen(seed, v), f"{ctx}: {name} version {v} is torn or wrong")
            self.assertLess(v, k, f"{ctx}: {name} version {v} is durable before f{v:04d} "
                                  f"(only {k} data files): not a prefix of the close order")
        extra = names - set(data) - {"tracker", "tracker.tmp", "meta"}
        self.assertFalse(extra, f"{ctx}: unexpected names in BACKING: {sorted(extra)}")
        return k

    def test_kill9_leaves_a_prefix(self):
        seed = int(os.environ.get("CKPTFS_CRASH_SEED", random.randrange(1 << 30)))
        print(f"\ncrash test seed: {seed} (set CKPTFS_CRASH_SEED={seed} to replay)", file=sys.stderr)
        rng = random.Random(seed)
        results = []  # (files the writer closed, files BACKING held after the next mount)

        def check_recovered():
            """After a mount: every run holds what its writer closed (recovered from the cache's
            memory, or durable before the kill), and no more than one past it."""
            for prev, (closed, held) in enumerate(results):
                k = self.check_run(m.backing, prev, seed, closed)
                self.assertGreaterEqual(k, max(closed, held),
                                        f"run {prev}: files the writer closed were lost")
                results[prev] = (closed, k)
                if k:
                    with open(m.path(f"run{prev}", f"f{k - 1:04d}"), "rb") as f:
                        self.assertTrue(f.read() == data_content(seed, k - 1))

        with CkptfsMount(options=["flush_delay=0", "cache_size=64M"],
                         expect_errors=[]) as m:
            for run in range(ITERATIONS):
                if run > 0:
                    m.start()
                    self.assertEqual(m.staging_files(), [],
                                     "the new mount did not remove leftover staging files")
                    check_recovered()
                log = os.path.join(m.workdir, f"writer{run}.log")
                err = open(os.path.join(m.workdir, f"writer{run}.err"), "w")
                os.mkdir(m.path(f"run{run}"))
                writer = subprocess.Popen(
                    [sys.executable, os.path.join(HERE, "crash_writer.py"), m.path(f"run{run}"),
                     str(seed), str(FILES_PER_RUN), log], stdout=err, stderr=err, cwd="/")
                delay = rng.uniform(0.2, 1.5)
                time.sleep(delay)
                writer_done = writer.poll() is not None
                m.kill9()
                try:
                    writer.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    writer.kill()
                    writer.wait()
                    self.fail("the writer hung after the daemon was killed")
                err.close()
                with open(log) as f:
                    closed = sum(1 for line in f if line.startswith("f"))
                leftovers = len(m.staging_files())
                k = self.check_run(m.backing, run, seed, closed)
                print(f"run {run}: killed after {delay:.2f}s, writer closed {closed} files, "
                      f"{k} durable, {leftovers} staging leftovers"
                      + (" (writer had finished)" if writer_done else ""), file=sys.stderr)
                results.append((closed, k))
            m.start()
            self.assertEqual(m.staging_files(), [])
            check_recovered()
            self.assertEqual(m.unmount(), 0)
        self.assertGreater(sum(closed for closed, _ in results), 0,
                           "no writer closed a file: the test proved nothing")


if __name__ == "__main__":
    unittest.main()
