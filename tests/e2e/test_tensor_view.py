"""The tensor view of real checkpoints (core/views/tensor_view/): DCP saved by 2 ranks with every kind of
sharding (tensor_view_workload) and Megatron-core torch_dist, read tensor by tensor with zarr
through `.tensors` and compared with what DCP's own loader reads; shell tools on the view; a view
that follows its checkpoint rewritten and removed; a hostile .metadata."""

import collections
import errno
import json
import os
import subprocess
import threading
import time
import unittest

import numpy as np

from ckptfs_testing import workloads
from ckptfs_testing.workloads import tensor_view as tv
from ckptfs_testing.checksums import whole_crc32c
from ckptfs_testing.ckptfs_daemon import CkptfsDaemon
from ckptfs_testing.e2e_check import fresh_mount


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


class TensorViewTest(unittest.TestCase):
    def check_view(self, ckpt):
        """Every tensor of .metadata is in the view, with its shape and dtype, and reads as DCP
        loads it."""
        shapes = tv.metadata_shapes(ckpt)
        ref = tv.reference(ckpt)
        info, arrays = tv.read_view(ckpt)
        self.assertEqual(info["skipped"], [])
        self.assertEqual(set(arrays), set(shapes))
        for t in info["tensors"]:
            fqn = t["fqn"]
            shape, dtype = shapes[fqn]
            self.assertEqual(tuple(t["shape"]), shape, fqn)
            self.assertEqual(t["torch_dtype"], dtype, fqn)
            expected = tv.as_served(ref[fqn])
            got = arrays[fqn]
            self.assertEqual(got.dtype, expected.dtype, fqn)
            self.assertEqual(got.shape, expected.shape, fqn)
            self.assertTrue(np.array_equal(got, expected), f"{fqn}: the view reads other values")
        return info

    def check_sources(self, info, backing_ckpt, by):
        """info.json shows each source file durable, with the CRC32C of its bytes on the backing
        store (PyPI crc32c's), and, when `by` is given, the daemon's last check of it: ok, by
        `by`."""
        names = sorted(n for n in os.listdir(backing_ckpt) if n == ".metadata" or n.endswith(".distcp"))
        self.assertEqual(sorted(info["sources"]), names)
        for name, source in info["sources"].items():
            self.assertTrue(source["durable"], name)
            self.assertEqual(source["crc32c"], whole_crc32c(os.path.join(backing_ckpt, name)), name)
            if by is None:
                self.assertNotIn("last_verification", source, name)
                continue
            check = source.get("last_verification")
            self.assertIsNotNone(check, name)
            self.assertEqual((check["result"], check["by"]), ("ok", by), name)
            self.assertRegex(check["at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

    def test_a_dcp_save_by_two_ranks_reads_through_zarr_as_dcp_loads_it_tensor_by_tensor(self):
        d, backing, mnt = fresh_mount(self, "ckptfs-e2e-view-dcp-", ("cache_size=1G", "verify=all"))
        ckpt = os.path.join(mnt, "ck")
        tv.save(ckpt)
        info = self.check_view(ckpt)
        grids = {t["fqn"]: t["grid"] for t in info["tensors"]}
        self.assertEqual(grids["dt.even"], "shards")
        self.assertEqual(grids["dt.edge"], "shards")
        self.assertEqual(grids["st.uneven"], "finest")
        self.assertEqual(grids["st.blocks"], "finest")
        self.assertEqual({i["fqn"] for i in info["items"]}, {"step", "meta.name"})
        # The byte items are the pickled objects DCP wrote.
        import torch
        with open(os.path.join(ckpt, tv.VIEW, "step"), "rb") as f:
            self.assertEqual(torch.load(f, weights_only=False), 12)
        d.sync()
        info = tv.read_view(ckpt)[0]
        self.assertTrue(all(t["durable"] for t in info["tensors"]))
        # verify=markers read every file back before publishing it.
        self.check_sources(info, os.path.join(backing, "ck"), "markers")
        self.assertEqual(d.unmount(), 0, d.output()[-3000:])
        self.assertEqual(d.error_lines(), [], "the daemon logged errors")
        # Mounted again: the view reads the backing store alone; info.json takes each source's
        # checksum from its record (not from its bytes: nothing is verified for it), and shows
        # the check verify=reads makes of a source before its first read.
        d2 = CkptfsDaemon(backing, mnt, ("cache_size=1G", "verify=reads"))
        self.addCleanup(d2.cleanup)
        d2.start()
        for _ in range(3):
            with open(os.path.join(ckpt, tv.VIEW, "info.json")) as f:
                self.check_sources(json.load(f), os.path.join(backing, "ck"), None)
        self.assertEqual(d2.stats()["bytes_verified_for_reads"], 0)
        for name in os.listdir(ckpt):
            with open(os.path.join(ckpt, name), "rb") as f:
                f.read(1)
        with open(os.path.join(ckpt, tv.VIEW, "info.json")) as f:
            self.check_sources(json.load(f), os.path.join(backing, "ck"), "reads")
        self.check_view(ckpt)
        self.assertEqual(d2.unmount(), 0, d2.output()[-3000:])

    def test_shell_tools_list_size_and_find_the_view_and_du_counts_only_what_is_stored(self):
        d, backing, mnt = fresh_mount(self, "ckptfs-e2e-view-shell-")
        ckpt = os.path.join(mnt, "ck")
        tv.save(ckpt)
        view = os.path.join(ckpt, tv.VIEW)
        info, _ = tv.read_view(ckpt)
        # Found by name, never listed: copies and loaders of the checkpoint do not see it.
        self.assertNotIn(tv.VIEW, run("ls", "-a", ckpt).split())
        self.assertEqual(sorted(run("ls", view).split()),
                         sorted([t["path"] for t in info["tensors"]] + [i["path"] for i in info["items"]]
                                + ["info.json"]))
        self.assertEqual(int(run("sh", "-c", f"find {view} -name .zarray | wc -l")), len(info["tensors"]))
        self.assertEqual(run("du", "-s", view).split()[0], "0")
        # Read-only: nothing is made, changed or removed in it.
        chunk = os.path.join(view, info["tensors"][0]["path"], ".zarray")
        for change in (lambda: open(os.path.join(view, "info.json"), "w"),
                       lambda: open(os.path.join(view, "new"), "w"),
                       lambda: os.mkdir(os.path.join(view, "d")),
                       lambda: os.unlink(chunk),
                       lambda: os.rename(chunk, os.path.join(ckpt, "moved")),
                       lambda: os.truncate(chunk, 0)):
            with self.assertRaises(OSError) as e:
                change()
            self.assertEqual(e.exception.errno, errno.EROFS)
        for t in info["tensors"]:
            tensor_dir = os.path.join(view, t["path"])
            files = [os.path.join(tensor_dir, f) for f in os.listdir(tensor_dir)]
            chunks = sum(os.path.getsize(f) for f in files if not os.path.basename(f).startswith("."))
            apparent = int(run("du", "-s", "-b", "--apparent-size", tensor_dir).split()[0])
            self.assertEqual(apparent, sum(os.path.getsize(f) for f in files), t["fqn"])
            # The chunks hold the tensor's bytes, and zarr's padding of edge chunks.
            self.assertGreaterEqual(chunks, t["bytes"], t["fqn"])
            if t["grid"] == "shards" and t["fqn"] == "dt.even":
                self.assertEqual(chunks, t["bytes"])
        self.assertEqual(d.unmount(), 0, d.output()[-3000:])

    def test_the_view_follows_its_checkpoint_rewritten_then_removed(self):
        d, backing, mnt = fresh_mount(self, "ckptfs-e2e-view-rewrite-")
        ckpt = os.path.join(mnt, "ck")
        os.makedirs(ckpt)
        with open(os.path.join(ckpt, ".metadata"), "wb") as f:
            f.write(b"\x80\x04not a pickle at all" * 100)
        info, arrays = tv.read_view(ckpt)
        self.assertEqual(arrays, {})
        self.assertIn("error", info)
        tv.save(ckpt)
        self.check_view(ckpt)
        run("rm", "-rf", ckpt)
        self.assertFalse(os.path.exists(os.path.join(ckpt, tv.VIEW)))
        self.assertEqual(d.unmount(), 0, d.output()[-3000:])

    def check_torch_view(self, path, skipped=()):
        """Every tensor torch.load finds in the file at path is in the view (but `skipped`), and
        reads as torch.load reads it."""
        ref = tv.torch_reference(path)
        entry, arrays = tv.read_torch_view(path)
        self.assertEqual({s["key"] for s in entry["skipped"]}, set(skipped))
        self.assertEqual(set(arrays), set(ref) - set(skipped))
        for key, got in arrays.items():
            expected = tv.as_served(ref[key].contiguous())
            self.assertEqual((got.dtype, got.shape), (expected.dtype, expected.shape), key)
            self.assertTrue(np.array_equal(got, expected), f"{key}: the view reads other values")
        return entry

    def test_reads_while_the_checkpoint_is_rewritten_give_the_old_or_the_new_bytes_or_an_error(self):
        d, backing, mnt = fresh_mount(self, "ckptfs-e2e-view-race-")
        ckpt = os.path.join(mnt, "ck")
        tv.save(ckpt, version=1)
        old = tv.view_chunks(ckpt)
        stop, seen, reads = threading.Event(), collections.Counter(), []

        def reader():
            view = os.path.join(ckpt, tv.VIEW)
            while not stop.is_set():
                for path in old:
                    try:
                        with open(os.path.join(view, path), "rb") as f:
                            data = f.read()
                    except OSError as e:
                        seen[errno.errorcode.get(e.errno, str(e.errno))] += 1
                        continue
                    reads.append((path, data))
        readers = [threading.Thread(target=reader) for _ in range(3)]
        for r in readers:
            r.start()
        try:
            tv.save(ckpt, version=2)
            time.sleep(0.5)
        finally:
            stop.set()
            for r in readers:
                r.join()
        new = tv.view_chunks(ckpt)
        self.assertEqual(set(new), set(old))
        self.assertNotEqual(new, old)
        for path, data in reads:
            seen["old" if data == old[path] else "new" if data == new[path] else "neither"] += 1
        self.assertEqual(seen["neither"], 0, f"reads gave bytes of neither save: {seen}")
        # The errors README.md's .tensors section gives: ESTALE from a file of the replaced view
        # once the files it reads changed, ENOENT while the view is not shown.
        errors = set(seen) - {"old", "new", "neither"}
        self.assertLessEqual(errors, {"ESTALE", "ENOENT"}, f"reads failed otherwise: {seen}")
        self.assertGreater(seen["new"], 0, seen)
        self.check_view(ckpt)
        self.assertEqual(d.unmount(), 0, d.output()[-3000:])
        self.assertEqual(d.error_lines(), [], "the daemon logged errors")

    def test_a_megatron_torch_dist_checkpoint_reads_through_zarr_as_dcp_loads_it(self):
        d, backing, mnt = fresh_mount(self, "ckptfs-e2e-view-mcore-")
        w = workloads.make("mcore_torch_dist", for_test=True)
        ckpt = os.path.join(mnt, "m")
        w.save(ckpt)
        info = self.check_view(ckpt)
        self.assertGreater(len(info["tensors"]), 10)
        # Its common.pt is shown beside the tensors, as a torch.save file.
        self.check_torch_view(os.path.join(ckpt, "common.pt"))
        self.assertEqual(d.unmount(), 0, d.output()[-3000:])
        self.assertEqual(d.error_lines(), [], "the daemon logged errors")

    def test_a_megatron_legacy_torch_save_reads_through_zarr_as_torch_loads_it(self):
        d, backing, mnt = fresh_mount(self, "ckptfs-e2e-view-legacy-")
        w = workloads.make("torch_legacy", for_test=True)
        w.save(mnt)
        path = os.path.join(mnt, f"iter_{workloads.ITERATION:07d}", "mp_rank_00", "model_optim_rng.pt")
        entry = self.check_torch_view(path)
        self.assertGreater(len(entry["tensors"]), 10)
        self.assertEqual(d.unmount(), 0, d.output()[-3000:])
        self.assertEqual(d.error_lines(), [], "the daemon logged errors")

    def test_an_optimizer_state_dict_reads_through_zarr_and_its_other_objects_are_listed_by_type(self):
        d, backing, mnt = fresh_mount(self, "ckptfs-e2e-view-optim-")
        os.makedirs(os.path.join(mnt, "o"))
        path = os.path.join(mnt, "o", "state.pt")
        tv.save_optimizer_state(path)
        # A real entry of the view's name wins over the view.
        real = os.path.join(mnt, "r")
        os.makedirs(os.path.join(real, tv.VIEW))
        tv.save_optimizer_state(os.path.join(real, "state.pt"))
        self.assertEqual(os.listdir(os.path.join(real, tv.VIEW)), [])
        # A transposed tensor is not row-major: listed as skipped, not shown.
        entry = self.check_torch_view(path, skipped=("extra/transposed",))
        objects = {o["key"]: o for o in entry["objects"]}
        self.assertEqual(objects["iteration"]["value"], 3)
        self.assertEqual(objects["optimizer/param_groups/0/lr"]["value"], 1e-3)
        self.assertEqual(objects["optimizer/param_groups/0/amsgrad"]["type"], "bool")
        self.assertEqual(d.unmount(), 0, d.output()[-3000:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
