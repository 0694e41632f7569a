"""`ckptfs verify`: the checksum records the flusher keeps with published files (PyPI crc32c,
chunk by chunk), and files re-read and compared with them, through a mount and on the backing
directory, under the default options."""

import errno
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import crc32c
import numpy as np
import zarr

from ckptfs_testing.checksums import MANIFEST, XATTR, parse_record, record_of, sums_of
from ckptfs_testing.file_contents import distinct_content
from ckptfs_testing.harness import CkptfsMount, require_fuse, run_ckptfs

MiB = 1 << 20


# name: size. big.bin has six chunks of 8 MiB (the last one partial); b.bin and c.bin have the
# same size (swapped below).
FILES = {"big.bin": 40 * MiB + 123, "b.bin": MiB, "c.bin": MiB, "sub/g.bin": 20 * MiB,
         "sub/small.txt": 5000, "sub/deeper/empty": 0, "sub/deeper/x_removed": 3000,
         "sub/deeper/x_garbage": 3000, "sub/deeper/x_long": 3000}


def verify(*args):
    """Runs `ckptfs verify ARGS --json -`: (exit status, report, stderr lines)."""
    r = run_ckptfs(["verify", *args, "--json", "-"], timeout=300)
    try:
        report = json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f"no JSON report ({r.returncode}): {r.stdout!r} {r.stderr!r}")
    return r.returncode, report, r.stderr.splitlines()


def by_path(report, root):
    return {os.path.relpath(f["path"], root): f for f in report["files"]}


class VerifyTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        self.dir = os.path.realpath(tempfile.mkdtemp(prefix="ckptfs-verify-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.backing = os.path.join(self.dir, "backing")
        os.mkdir(self.backing)

    def write_through_mount(self, m):
        for name, size in FILES.items():
            os.makedirs(os.path.dirname(m.path(name)), exist_ok=True)
            with open(m.path(name), "wb") as f:
                f.write(distinct_content(name, size))
        m.sync()

    def assert_all_ok(self, report, root):
        self.assertEqual(len(report["files"]), len(FILES), report)  # Each file once.
        files = by_path(report, root)
        self.assertEqual(sorted(files), sorted(FILES), report)
        for name, size in FILES.items():
            self.assertEqual((files[name]["status"], files[name]["size"]), ("ok", size), name)
        self.assertEqual(report["exit_status"], 0)

    def test_files_written_through_a_mount_verify_and_their_records_are_crc32c_per_chunk(self):
        with CkptfsMount(backing=self.backing) as m:
            self.write_through_mount(m)
            status, report, err = verify(m.mnt, m.path("big.bin"))
            self.assertEqual(status, 0, err)
            self.assert_all_ok(report, m.mnt)
            status, report, err = verify(self.backing)
            self.assertEqual(status, 0, err)
            self.assert_all_ok(report, self.backing)  # Without the backing store's .ckptfs/.
        for name, size in FILES.items():
            chunk, recorded_size, sums = parse_record(
                os.getxattr(os.path.join(self.backing, name), XATTR))
            data = distinct_content(name, size)
            self.assertEqual((chunk, recorded_size), (8 * MiB, size), name)
            self.assertEqual(sums, [crc32c.crc32c(data[at:at + chunk])
                                    for at in range(0, size, chunk)], name)
        self.assertEqual(os.getxattr(os.path.join(self.backing, "sub/deeper/empty"), XATTR),
                         b"crc32c chunk=8388608 size=0 sums=")

    def test_with_verify_markers_every_file_is_read_back_before_it_is_published(self):
        with CkptfsMount(options=("verify=markers",), backing=self.backing) as m:
            self.write_through_mount(m)
            with open(m.path("sub/.metadata"), "wb") as f:  # A commit marker, published last.
                f.write(b"done")
            m.sync()
            stats = m.stats()
            self.assertEqual(stats["checksum_mismatches"], 0, stats)
            self.assertGreaterEqual(stats["bytes_read_back"], sum(FILES.values()) + 4, stats)
        status, report, err = verify(self.backing)
        self.assertEqual(status, 0, err)

    def test_corrupt_backing_files_are_named_with_the_first_differing_mib(self):
        with CkptfsMount(backing=self.backing) as m:
            self.write_through_mount(m)
        b = lambda name: os.path.join(self.backing, name)  # noqa: E731
        with open(b("big.bin"), "r+b") as f:  # One byte flipped in chunk 2 (16-24 MiB).
            f.seek(17 * MiB + 5)
            byte = f.read(1)
            f.seek(17 * MiB + 5)
            f.write(bytes([byte[0] ^ 0x20]))
        os.truncate(b("sub/g.bin"), 10 * MiB + 1)  # Ends in chunk 1 (8-16 MiB).
        with open(b("b.bin"), "r+b") as fb, open(b("c.bin"), "r+b") as fc:
            bb, cc = fb.read(), fc.read()
            fb.seek(0)
            fb.write(cc)
            fc.seek(0)
            fc.write(bb)
        expected = {"big.bin": ("16-24", False), "sub/g.bin": ("8-16", True),
                    "b.bin": ("0-1", False), "c.bin": ("0-1", False)}
        status, report, err = verify(self.backing)
        self.assert_mismatches(status, report, err, self.backing, expected)
        # Read through a mount of that backing directory, the same files differ.
        with CkptfsMount(backing=self.backing) as m:
            status, report, err = verify(m.mnt)
            self.assert_mismatches(status, report, err, m.mnt, expected)
        r = run_ckptfs(["verify", self.backing])
        self.assertEqual(r.returncode, 1)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 4, r.stdout)
        self.assertIn(f"{b('big.bin')}: mismatch, first differing MiB: 16-24 (bytes "
                      f"{16 * MiB}-{24 * MiB})", lines)
        self.assertIn(f"{b('sub/g.bin')}: mismatch, first differing MiB: 8-16 (bytes "
                      f"{8 * MiB}-{16 * MiB}), size {10 * MiB + 1} but recorded {20 * MiB}", lines)

    def assert_mismatches(self, status, report, err, root, expected):
        self.assertEqual(status, 1, err)
        files = by_path(report, root)
        self.assertEqual(sorted(files), sorted(FILES))
        for name in FILES:
            f = files[name]
            if name not in expected:
                self.assertEqual(f["status"], "ok", f)
                continue
            mib, size_differs = expected[name]
            self.assertEqual((f["status"], f["first_differing_mib"], f["size_differs"]),
                             ("mismatch", mib, size_differs), f)
            lo, hi = (int(x) for x in mib.split("-"))
            self.assertEqual(f["first_differing_bytes"], [lo * MiB, hi * MiB], f)

    def test_a_removed_or_edited_record_gives_status_2_saying_why(self):
        with CkptfsMount(backing=self.backing) as m:
            self.write_through_mount(m)
            b = lambda name: os.path.join(self.backing, "sub/deeper", name)  # noqa: E731
            os.removexattr(b("x_removed"), XATTR)
            os.setxattr(b("x_garbage"), XATTR, b"crc32c chunk=8388608 size=3000 sums=zz\n\x00")
            os.setxattr(b("x_long"), XATTR, b"crc32c " + b"0" * 4000)
            for root in (m.mnt, self.backing):
                status, report, err = verify(os.path.join(root, "sub"))
                self.assertEqual(status, 2, err)
                files = by_path(report, os.path.join(root, "sub"))
                self.assertEqual(
                    {n: f["status"] for n, f in files.items()},
                    {"g.bin": "ok", "small.txt": "ok", "deeper/empty": "ok",
                     "deeper/x_removed": "no_checksum", "deeper/x_garbage": "no_checksum",
                     "deeper/x_long": "no_checksum"})
                self.assertIn("no checksum record", files["deeper/x_removed"]["reason"])
                self.assertEqual(files["deeper/x_garbage"]["reason"],
                                 "malformed checksum record: a sum is not 8 lowercase hex digits")
                self.assertEqual(files["deeper/x_long"]["reason"],
                                 "malformed checksum record: longer than 1232 bytes")
                self.assertEqual(report["counts"]["no_checksum"], 3)

    def test_files_still_open_for_writing_in_a_mount_are_not_durable_yet(self):
        with CkptfsMount(backing=self.backing) as m:
            self.write_through_mount(m)
            # Written as torch.save writes (O_WRONLY: straight to the mount's memory), not closed.
            new = os.open(m.path("open.bin"), os.O_WRONLY | os.O_CREAT, 0o644)
            old = os.open(m.path("sub/g.bin"), os.O_WRONLY)
            try:
                os.write(new, distinct_content("open.bin", 3 * MiB))
                os.pwrite(old, b"rewritten", 9 * MiB)
                status, report, err = verify(m.mnt)
            finally:
                os.close(new)
                os.close(old)
            self.assertEqual(status, 2, err)
            files = by_path(report, m.mnt)
            for name in ("open.bin", "sub/g.bin"):
                self.assertEqual(files[name]["status"], "no_checksum", files[name])
                self.assertTrue(files[name]["not_durable"], files[name])
            self.assertEqual(report["counts"]["not_durable"], 2)
            self.assertEqual(report["counts"]["ok"], len(FILES) - 1)
            status, report, err = verify(m.mnt)  # Closed since: synced by verify, and ok.
            self.assertEqual(status, 0, err)

    def test_a_backing_file_changed_under_a_mount_is_a_mismatch_through_it(self):
        with CkptfsMount(backing=self.backing) as m:
            self.write_through_mount(m)
            with open(os.path.join(self.backing, "big.bin"), "r+b") as f:
                f.seek(33 * MiB)
                f.write(b"X")
            status, report, err = verify(m.mnt)
            self.assertEqual(status, 1, err)
            f = by_path(report, m.mnt)["big.bin"]
            self.assertEqual((f["status"], f["first_differing_mib"]), ("mismatch", "32-40"), f)

    def test_with_verify_reads_corrupt_backing_files_fail_their_reads_with_eio(self):
        with CkptfsMount(backing=self.backing) as m:
            self.write_through_mount(m)
        with open(os.path.join(self.backing, "big.bin"), "r+b") as f:
            f.seek(17 * MiB)
            byte = f.read(1)
            f.seek(17 * MiB)
            f.write(bytes([byte[0] ^ 1]))
        os.truncate(os.path.join(self.backing, "sub/g.bin"), 10 * MiB)
        with open(os.path.join(self.backing, "unrecorded.bin"), "wb") as f:
            f.write(b"written beside the mount")
        with CkptfsMount(options=("verify=reads",), backing=self.backing,
                         expect_errors=[r"(big|g)\.bin: its backing file does not match"]) as m:
            for name in ("big.bin", "sub/g.bin"):
                for _ in range(2):  # The verdict stays: the second read fails at once.
                    with open(m.path(name), "rb") as f:
                        with self.assertRaises(OSError) as raised:
                            f.read(4096)
                        self.assertEqual(raised.exception.errno, errno.EIO, name)
            for name in ("b.bin", "sub/small.txt"):
                with open(m.path(name), "rb") as f:
                    self.assertEqual(f.read(), distinct_content(name, FILES[name]), name)
            with open(m.path("unrecorded.bin"), "rb") as f:
                self.assertEqual(f.read(), b"written beside the mount")
            stats = m.stats()
            self.assertEqual(stats["read_mismatches"], 2, stats)
            self.assertEqual(stats["read_files_verified"], 2, stats)
            self.assertEqual(stats["read_files_unrecorded"], 1, stats)
            with open(m.log_file, errors="replace") as log:
                text = log.read()
            self.assertIn("big.bin: its backing file does not match its checksum record "
                          "(bytes 16777216-25165824)", text)
            self.assertIn("sub/g.bin: its backing file does not match its checksum record "
                          "(bytes 8388608-16777216, the size differs)", text)
        # Without the option the same bytes are served as they are: only the records tell.
        with CkptfsMount(backing=self.backing) as m:
            with open(m.path("big.bin"), "rb") as f:
                f.seek(17 * MiB)
                self.assertNotEqual(f.read(1), distinct_content("big.bin", 17 * MiB + 1)[-1:])

    def test_over_a_filesystem_without_user_xattrs_records_are_kept_in_a_manifest_per_directory(self):
        # ramfs keeps no extended attributes (setxattr: EOPNOTSUPP) and has no O_DIRECT.
        ramfs = os.path.join(self.dir, "ramfs")
        os.mkdir(ramfs)
        subprocess.run(["mount", "-t", "ramfs", "ramfs", ramfs], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", ramfs], check=False)
        backing = os.path.join(ramfs, "backing")
        os.mkdir(backing)
        b = lambda name: os.path.join(backing, name)  # noqa: E731
        with CkptfsMount(options=("verify=markers",), backing=backing) as m:
            self.write_through_mount(m)
            stats = m.stats()
            self.assertEqual((stats["checksum_mismatches"], stats["flush_errors"]), (0, 0), stats)
            # The manifests are the backing store's, not the mount's: never listed, never found,
            # never made through it.
            for d in ("", "sub", "sub/deeper"):
                self.assertTrue(os.path.isfile(os.path.join(backing, d, MANIFEST)), d)
                self.assertNotIn(MANIFEST, os.listdir(m.path(d) if d else m.mnt))
                self.assertFalse(os.path.exists(os.path.join(m.path(d) if d else m.mnt, MANIFEST)))
            for make in (lambda: open(m.path("sub", MANIFEST), "w"),
                         lambda: os.mkdir(m.path(MANIFEST)),
                         lambda: os.rename(m.path("b.bin"), m.path("sub", MANIFEST)),
                         lambda: os.link(m.path("b.bin"), m.path(MANIFEST))):
                with self.assertRaises(OSError) as made:
                    make()
                self.assertEqual(made.exception.errno, errno.EPERM)
            status, report, err = verify(m.mnt)
            self.assertEqual(status, 0, err)
            self.assert_all_ok(report, m.mnt)
            # A file renamed after it was published takes its record to its new name.
            with open(m.path("renamed.tmp"), "wb") as f:
                f.write(distinct_content("renamed", 3 * MiB))
            m.sync()
            os.rename(m.path("renamed.tmp"), m.path("sub", "renamed.bin"))
            m.sync()
            status, report, err = verify(m.path("sub", "renamed.bin"))
            self.assertEqual(status, 0, (report, err))
            os.remove(m.path("sub", "renamed.bin"))
            m.sync()
            with open(m.log_file, errors="replace") as log:
                text = log.read()
            self.assertIn(f"checksum records of published files are kept in {MANIFEST}", text)
            # ramfs has no O_DIRECT: read back through the page cache, and said.
            self.assertIn("no O_DIRECT: verify=markers reads files back from this machine's "
                          "page cache", text)
        for name, size in FILES.items():
            self.assertEqual(record_of(b(name)), (8 * MiB, size, sums_of(b(name), 8 * MiB)), name)
        status, report, err = verify(backing)
        self.assertEqual(status, 0, err)
        self.assert_all_ok(report, backing)  # The manifests are not verified as files.
        # Corruption is found through the manifest, by verify and by verify=reads.
        with open(b("big.bin"), "r+b") as f:
            f.seek(17 * MiB + 5)
            byte = f.read(1)
            f.seek(17 * MiB + 5)
            f.write(bytes([byte[0] ^ 0x20]))
        status, report, err = verify(backing)
        self.assert_mismatches(status, report, err, backing, {"big.bin": ("16-24", False)})
        with CkptfsMount(options=("verify=reads",), backing=backing,
                         expect_errors=[r"big\.bin: its backing file does not match"]) as m:
            with open(m.path("big.bin"), "rb") as f:
                with self.assertRaises(OSError) as raised:
                    f.read(4096)
                self.assertEqual(raised.exception.errno, errno.EIO)
            with open(m.path("b.bin"), "rb") as f:
                self.assertEqual(f.read(), distinct_content("b.bin", FILES["b.bin"]))
            self.assertEqual(m.stats()["read_files_verified"], 1)
        # A hostile manifest, or none: status 2 saying why, never a crash.
        with open(b(os.path.join("sub", MANIFEST)), "w") as f:
            f.write('{"ckptfs_checksums": 1, "files": {"g.bin": [' * 1000)
        os.remove(b(os.path.join("sub/deeper", MANIFEST)))
        status, report, err = verify(b("sub"))
        self.assertEqual(status, 2, err)
        files = by_path(report, b("sub"))
        self.assertEqual({n: f["status"] for n, f in files.items()},
                         {n[len("sub/"):]: "no_checksum" for n in FILES if n.startswith("sub/")})
        self.assertIn("malformed checksum manifest", files["g.bin"]["reason"])
        self.assertIn("no checksum record", files["deeper/empty"]["reason"])

    def test_a_zarr_array_the_mount_shows_with_a_fine_grid_is_verified_as_stored(self):
        with CkptfsMount(backing=self.backing) as m:
            z = zarr.open(m.path("arr"), mode="w", shape=(4096, 1024), chunks=(4096, 1024),
                          dtype="f4", compressor=None)
            z[:] = np.arange(4096 * 1024, dtype="f4").reshape(4096, 1024)
            m.sync()
            self.assertEqual([a["path"] for a in m.stats()["zarr_fine_grid"]], ["arr"])
            self.assertGreater(len(os.listdir(m.path("arr"))), 2)  # The fine grid's chunks.
            status, report, err = verify(m.mnt)
            self.assertEqual(status, 0, err)
            stored = [os.path.join(self.backing, "arr", n) for n in (".zarray", "0.0")]
            self.assertEqual([(f["path"], f["status"]) for f in report["files"]],
                             [(p, "ok") for p in stored])
            with open(stored[1], "r+b") as f:  # The real chunk, 16 MiB.
                f.seek(12 * MiB)
                f.write(b"X")
            status, report, err = verify(m.path("arr"))
            self.assertEqual(status, 1, err)
            f = by_path(report, self.backing)["arr/0.0"]
            self.assertEqual((f["status"], f["first_differing_mib"]), ("mismatch", "8-16"), f)

    def test_the_report_goes_to_the_file_named_and_an_unwritable_one_is_named(self):
        with CkptfsMount(backing=self.backing) as m:
            self.write_through_mount(m)
        report_path = os.path.join(self.dir, "report.json")
        r = run_ckptfs(["verify", self.backing, "--json", report_path])
        self.assertEqual((r.returncode, r.stdout), (0, ""), r.stderr)
        with open(report_path) as f:
            self.assert_all_ok(json.load(f), self.backing)
        r = run_ckptfs(["verify", self.backing, "--json", self.backing])
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"ckptfs verify: cannot write the report {self.backing}: Is a directory",
                      r.stderr)

    def test_bad_paths_are_named_and_lose_nothing(self):
        missing = os.path.join(self.dir, "nope")
        r = run_ckptfs(["verify", missing])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, f"{missing}: unreadable: No such file or directory\n")
        r = run_ckptfs(["verify"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("PATH", r.stderr)


if __name__ == "__main__":
    unittest.main()
