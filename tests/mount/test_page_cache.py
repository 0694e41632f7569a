"""Write-only opens bypass the kernel's page cache; what readers see through the cache stays right.

A write-only open of a file no cached handle has open goes straight to the daemon (direct_io).
These tests write through such handles while readers hold cached pages, and check that every
read returns the bytes written last, as on a plain directory.
"""

import os
import unittest

from harness import CkptfsMount, require_fuse

PAGE = 4096


def pread_all(fd, size):
    return os.pread(fd, size, 0)


class PageCacheTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def test_reader_opened_during_a_bypassing_write_sees_each_write(self):
        with CkptfsMount() as m:
            path = m.path("f")
            writer = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.pwrite(writer, b"A" * (4 * PAGE), 0)
                reader = os.open(path, os.O_RDONLY)
                try:
                    self.assertEqual(pread_all(reader, 4 * PAGE), b"A" * (4 * PAGE))
                    # The reader's pages are cached now; each write must reach them.
                    for round_, byte in enumerate(b"BCD"):
                        os.pwrite(writer, bytes([byte]) * PAGE, PAGE)
                        want = b"A" * PAGE + bytes([byte]) * PAGE + b"A" * (2 * PAGE)
                        self.assertEqual(pread_all(reader, 4 * PAGE), want, f"round {round_}")
                finally:
                    os.close(reader)
            finally:
                os.close(writer)

    def test_pages_cached_before_an_overwrite_are_dropped_at_the_next_open(self):
        with CkptfsMount() as m:
            path = m.path("f")
            with open(path, "wb") as f:
                f.write(b"1" * (8 * PAGE))
            with open(path, "rb") as f:
                self.assertEqual(f.read(), b"1" * (8 * PAGE))  # Now in the page cache.
            # An in-place overwrite through a write-only descriptor, with no reader open.
            fd = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(fd, b"2" * PAGE, 3 * PAGE)
            finally:
                os.close(fd)
            want = b"1" * (3 * PAGE) + b"2" * PAGE + b"1" * (4 * PAGE)
            for _ in range(2):
                with open(path, "rb") as f:
                    self.assertEqual(f.read(), want)

    def test_writer_opened_while_a_reader_is_open_writes_through_the_cache(self):
        with CkptfsMount() as m:
            path = m.path("f")
            with open(path, "wb") as f:
                f.write(b"x" * (2 * PAGE))
            reader = os.open(path, os.O_RDONLY)
            try:
                self.assertEqual(pread_all(reader, 2 * PAGE), b"x" * (2 * PAGE))
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, b"y" * 100)
                finally:
                    os.close(fd)
                self.assertEqual(pread_all(reader, 3 * PAGE), b"x" * (2 * PAGE) + b"y" * 100)
            finally:
                os.close(reader)
            self.assertEqual(os.path.getsize(path), 2 * PAGE + 100)


if __name__ == "__main__":
    unittest.main()
