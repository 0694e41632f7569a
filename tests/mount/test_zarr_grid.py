"""The zarr fine grid: large uncompressed zarr chunks are served as a grid of <= 1 MiB chunks.

Real zarr (2.x, from .venv/) writes and reads through the mount; the same operations run on a
plain directory; the backing directory must end up byte-identical to the plain one (zarr's
ProcessSynchronizer lock files aside), and zarr must read the same data through the mount and
straight from the backing store.
"""

import errno
import json
import os
import shutil
import stat
import tempfile
import unittest

import numpy as np
import zarr

from ckptfs_testing.harness import CkptfsMount, describe_tree_diff, require_fuse, snapshot

MiB = 1 << 20


def tree_without_locks(root):
    """snapshot(root, contents="bytes") without zarr's lock directories (*.sync), whose file names follow the
    chunk keys clients use."""
    return {k: v for k, v in snapshot(root, contents="bytes").items()
            if not any(part.endswith(".sync") for part in k.split(os.sep))}


def distopt_save(root, name="opt", shard=3_000_000, pieces=40, ranks=2):
    """Megatron's distributed-optimizer pattern: per rank one chunk holding its whole flat shard,
    written parameter by parameter with set_coordinate_selection under a ProcessSynchronizer."""
    path = os.path.join(root, name)
    zarr.create((ranks * shard,), dtype=np.float32, compressor=None, chunks=(shard,), store=path,
                overwrite=True, fill_value=None, write_empty_chunks=True)
    sync = zarr.ProcessSynchronizer(path + ".sync")
    arr = zarr.open(path, mode="r+", synchronizer=sync)
    expected = np.zeros(ranks * shard, dtype=np.float32)
    rng = np.random.default_rng(5)
    for rank in range(ranks):
        cuts = np.sort(rng.choice(np.arange(1, shard), pieces - 1, replace=False))
        bounds = [0, *cuts.tolist(), shard]
        for a, b in zip(bounds, bounds[1:]):
            lo, hi = rank * shard + a, rank * shard + b
            values = rng.standard_normal(hi - lo).astype(np.float32)
            arr.set_coordinate_selection(np.arange(lo, hi), values)
            expected[lo:hi] = values
    return arr.chunks, expected


class ZarrFineGridTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        self.plain = tempfile.mkdtemp(prefix="ckptfs-zarr-plain-")
        self.addCleanup(shutil.rmtree, self.plain, ignore_errors=True)

    def assertSameTree(self, expected_root, actual_root):
        expected, actual = tree_without_locks(expected_root), tree_without_locks(actual_root)
        self.assertEqual(expected, actual, describe_tree_diff(expected, actual, "plain", "backing"))

    def test_distributed_optimizer_save_writes_real_chunks_once(self):
        plain_chunks, expected = distopt_save(self.plain)
        self.assertEqual(plain_chunks, (3_000_000,))
        with CkptfsMount(options=["flush_delay=2s"]) as m:
            chunks, _ = distopt_save(m.mnt)
            # 262,144 floats (1 MiB) does not divide the 3,000,000 of a real chunk: the largest
            # divisor below it is taken, so that no virtual chunk straddles two real ones.
            self.assertEqual(chunks, (250000,), "zarr itself saw the fine grid")
            with open(m.path("opt", ".zarray")) as f:
                self.assertEqual(json.load(f)["chunks"], [250000])
            names = sorted(os.listdir(m.path("opt")))
            self.assertEqual(names, sorted([".zarray"] + [str(k) for k in range(24)]))
            self.assertEqual(os.path.getsize(m.path("opt", "11")), 1_000_000)
            np.testing.assert_array_equal(zarr.open(m.path("opt"), mode="r")[:], expected)
            stats = m.stats()
            self.assertEqual([a["path"] for a in stats["zarr_fine_grid"]], ["opt"])
            self.assertEqual(stats["zarr_fine_grid"][0]["chunks"], [3_000_000])
            m.sync()
            self.assertSameTree(self.plain, m.backing)
            # Each real chunk reached the backing store once, whole: 2 x 12 MB, no rewrites.
            self.assertLess(m.stats()["bytes_flushed"], 2 * 12_000_000 * 1.05)
            np.testing.assert_array_equal(zarr.open(m.bpath("opt"), mode="r")[:], expected)
            self.assertEqual(m.unmount(), 0)
            self.assertSameTree(self.plain, m.backing)

    def test_array_on_the_backing_store_is_served_with_a_fine_grid(self):
        # 2-D, three real chunks along axis 0 with an edge chunk, NaN fill, written by plain zarr.
        def make(root):
            arr = zarr.create((1000, 1000), dtype="<f4", compressor=None, chunks=(400, 1000),
                              store=os.path.join(root, "w"), fill_value="NaN")
            arr[:] = np.arange(1_000_000, dtype=np.float32).reshape(1000, 1000)
            return arr
        make(self.plain)
        with CkptfsMount(options=["flush_delay=0"]) as m:
            shutil.copytree(os.path.join(self.plain, "w"), m.bpath("w"))
            with open(m.path("w", ".zarray")) as f:
                self.assertEqual(json.load(f)["chunks"], [200, 1000])
            served = zarr.open(m.path("w"), mode="r+")
            self.assertEqual(served.chunks, (200, 1000))
            np.testing.assert_array_equal(served[317:842, 5:990],
                                          zarr.open(os.path.join(self.plain, "w"))[317:842, 5:990])
            # A resharding write of a slice: the same on both sides.
            patch = np.full((150, 1000), -1.5, dtype=np.float32)
            served[700:850] = patch
            zarr.open(os.path.join(self.plain, "w"), mode="r+")[700:850] = patch
            self.assertEqual(m.unmount(), 0)
            self.assertSameTree(self.plain, m.backing)

    def test_arrays_that_do_not_qualify_are_passed_through(self):
        bad_zarrays = {
            "malformed": b'{"chunks": [100000000, "shape": ',
            "huge": json.dumps({"zarr_format": 2, "shape": [2 ** 63], "chunks": [2 ** 62],
                                "dtype": "<f8", "compressor": None, "filters": None,
                                "order": "C", "fill_value": None}).encode(),
            "deep": b"[" * 100000 + b"]" * 100000,
            "negative": json.dumps({"zarr_format": 2, "shape": [-1], "chunks": [-4],
                                    "dtype": "<f4", "compressor": None, "filters": None,
                                    "order": "C", "fill_value": None}).encode(),
        }
        with CkptfsMount() as m:
            for name, text in bad_zarrays.items():
                os.makedirs(m.bpath(name))
                with open(m.bpath(name, ".zarray"), "wb") as f:
                    f.write(text)
                with open(m.bpath(name, "0"), "wb") as f:
                    f.write(b"chunk bytes")
            os.makedirs(m.bpath("fifo"))
            os.mkfifo(m.bpath("fifo", ".zarray"))
            compressed = zarr.create((4 * MiB,), dtype="<f4", chunks=(2 * MiB,),
                                     store=m.path("compressed"))
            compressed[:] = 1.0
            fortran = zarr.create((2048, 2048), dtype="<f4", chunks=(2048, 2048), order="F",
                                  compressor=None, store=m.path("fortran"))
            fortran[:] = 2.0
            small = zarr.create((4 * MiB,), dtype="<f4", chunks=(65536,), compressor=None,
                                store=m.path("small"))
            small[:] = 3.0
            for name in bad_zarrays:
                self.assertEqual(sorted(os.listdir(m.path(name))), [".zarray", "0"])
                with open(m.path(name, ".zarray"), "rb") as f:
                    self.assertEqual(f.read(), bad_zarrays[name])
            # A FIFO is shown as one, never opened as a .zarray.
            self.assertEqual(os.listdir(m.path("fifo")), [".zarray"])
            self.assertTrue(stat.S_ISFIFO(os.lstat(m.path("fifo", ".zarray")).st_mode))
            with open(m.path("fortran", ".zarray")) as f:
                self.assertEqual(json.load(f)["chunks"], [2048, 2048])
            self.assertEqual(sorted(os.listdir(m.path("compressed"))), [".zarray", "0", "1"])
            self.assertEqual(m.stats()["zarr_fine_grid"], [])
            self.assertEqual(m.unmount(), 0)

    def test_zarr_chunk_0_turns_the_fine_grid_off(self):
        distopt_save(self.plain, pieces=5)
        with CkptfsMount(options=["zarr_chunk=0"]) as m:
            chunks, _ = distopt_save(m.mnt, pieces=5)
            self.assertEqual(chunks, (3_000_000,))
            self.assertEqual(sorted(os.listdir(m.path("opt"))), [".zarray", "0", "1"])
            self.assertEqual(m.unmount(), 0)
            self.assertSameTree(self.plain, m.backing)

    def test_views_of_the_array_are_not_files_of_their_own(self):
        with CkptfsMount() as m:
            _, expected = distopt_save(m.mnt, pieces=3)
            chunk = m.path("opt", "3")
            with self.assertRaises(OSError) as cm:
                os.rename(chunk, m.path("elsewhere"))
            self.assertEqual(cm.exception.errno, errno.EXDEV)  # mv falls back to a copy.
            with self.assertRaises(OSError) as cm:
                os.truncate(chunk, 10)
            self.assertEqual(cm.exception.errno, errno.EPERM)
            # A removed virtual chunk is missing for zarr (with fill_value None, what it reads
            # there is undefined); its range of the real chunk becomes the fill value, zeros.
            # Only zarr's rename brings it back.
            os.unlink(m.path("opt", "5"))
            gone = slice(5 * 250000, 6 * 250000)
            expected[gone] = 0
            self.assertNotIn("5", os.listdir(m.path("opt")))
            with self.assertRaises(OSError) as cm:
                open(m.path("opt", "5"), "wb").close()
            self.assertEqual(cm.exception.errno, errno.EPERM)
            with open(m.path("wrong"), "wb") as f:
                f.write(b"short")
            with self.assertRaises(OSError) as cm:
                os.rename(m.path("wrong"), chunk)
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            # Writes into a virtual chunk land at its offset in the real chunk.
            with open(chunk, "r+b") as f:
                f.seek(4 * 10)
                f.write(np.array([7.0, 8.0], dtype=np.float32).tobytes())
            expected[3 * 250000 + 10:3 * 250000 + 12] = [7.0, 8.0]
            got = zarr.open(m.path("opt"), mode="r")[:]
            got[gone] = 0
            np.testing.assert_array_equal(got, expected)
            shutil.copy(chunk, m.path("copy"))
            m.sync()
            # The backing store has the real chunk, zeros where chunk 5 was.
            np.testing.assert_array_equal(zarr.open(m.bpath("opt"), mode="r")[:], expected)
            self.assertEqual(m.unmount(), 0)

    def test_resize_and_delete_through_the_mount(self):
        def resize(root):
            distopt_save(root, pieces=4)
            zarr.open(os.path.join(root, "opt"), mode="r+").resize(3_000_000)
        resize(self.plain)
        with CkptfsMount() as m:
            resize(m.mnt)
            arr = zarr.open(m.path("opt"), mode="r")
            self.assertEqual((arr.shape, arr.chunks), ((3_000_000,), (250000,)))
            np.testing.assert_array_equal(arr[:], zarr.open(os.path.join(self.plain, "opt"))[:])
            m.sync()
            self.assertSameTree(self.plain, m.backing)
            shutil.rmtree(m.path("opt"))
            self.assertEqual(m.stats()["zarr_fine_grid"], [])
            m.sync()
            self.assertFalse(os.path.exists(m.bpath("opt")))
            self.assertEqual(m.unmount(), 0)


if __name__ == "__main__":
    unittest.main()
