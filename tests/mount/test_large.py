"""Test 9: a file much larger than the cache streams through (back-pressure, no hang)."""

import hashlib
import os
import subprocess
import sys
import time
import unittest

from ckptfs_testing.harness import CkptfsMount, require_fuse

SIZE_MIB = 200
WRITE_TIMEOUT = 90  # Seconds; a hang fails the test instead of blocking CTest.

# Writes SIZE MiB of pseudo-random data (1 MiB writes) and prints its sha256.
WRITER = r"""
import hashlib, os, random, sys
path, size_mib = sys.argv[1], int(sys.argv[2])
rng = random.Random(1234)
h = hashlib.sha256()
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(size_mib):
    block = rng.randbytes(1 << 20)
    h.update(block)
    view = memoryview(block)
    while view:
        view = view[os.write(fd, view):]
os.close(fd)
print(h.hexdigest(), flush=True)
"""


def sha256_of(path, timeout):
    """Hashes a file in a child process so that a hung read fails the test after timeout."""
    code = ("import hashlib,sys\nh=hashlib.sha256()\nf=open(sys.argv[1],'rb')\n"
            "while True:\n b=f.read(1<<20)\n if not b: break\n h.update(b)\nprint(h.hexdigest())")
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"reading {path} failed: {r.stderr}")
    return r.stdout.strip()


class LargeFileTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def test_200mib_through_32mib_cache(self):
        with CkptfsMount(options=["cache_size=32M", "flush_delay=0"]) as m:
            writer = subprocess.Popen([sys.executable, "-c", WRITER, m.path("big"), str(SIZE_MIB)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd="/")
            t0 = time.monotonic()
            try:
                out, err = writer.communicate(timeout=WRITE_TIMEOUT)
            except subprocess.TimeoutExpired:
                stats = "unreadable"
                try:
                    with open(m.path(".ckptfs", "stats")) as f:
                        stats = f.read()
                except OSError as e:
                    stats = str(e)
                writer.kill()
                writer.communicate()
                self.fail(f"writing {SIZE_MIB} MiB through a 32 MiB cache hung for "
                          f"{WRITE_TIMEOUT}s; stats: {stats}")
            self.assertEqual(writer.returncode, 0, err)
            digest = out.strip()
            print(f"\nwrote {SIZE_MIB} MiB in {time.monotonic() - t0:.1f}s", file=sys.stderr)
            self.assertEqual(os.stat(m.path("big")).st_size, SIZE_MIB << 20)
            stats = m.stats()
            self.assertLessEqual(stats["memory_used"], 32 << 20, stats)
            self.assertEqual(sha256_of(m.path("big"), 60), digest, "read back through the mount")
            m.sync(timeout=60)
            self.assertEqual(os.stat(m.bpath("big")).st_size, SIZE_MIB << 20)
            self.assertEqual(sha256_of(m.bpath("big"), 60), digest, "BACKING after sync")
            self.assertEqual(m.unmount(), 0)


if __name__ == "__main__":
    unittest.main()
