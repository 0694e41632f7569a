"""The remote tier's read path (restart on any node): a checkpoint saved with real DCP and
torch.save through a mount with a remote (a real moto S3 server) and synced to the store is shown,
after unmounting, by a mount of a new empty backing directory with the same remote, directory by
directory as it is looked at, and loads equal through DCP's loader and torch.load; names on the
store that are not one plain name are refused, never followed. With local_size, the files on the
store leave the backing directory oldest checkpoint first and are read back equal."""

MiB = 1 << 20
PLACEHOLDER_ATTR = "user.ckptfs.remote"

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from ckptfs_testing.file_contents import distinct_content
from ckptfs_testing.harness import CkptfsMount
from ckptfs_testing.remote_tests import BUCKET, RemoteStoreTestCase, sync_remote, write

PREFIX = "read"

# The state both sides make: deterministic tensors, a few MiB in all (some .distcp files span
# several ranged GETs of the fetch).
STATE = textwrap.dedent("""
    import torch

    def state(tag):
        g = torch.Generator().manual_seed(sum(map(ord, tag)))
        return {
            "model.embed": torch.randn(2048, 512, generator=g),
            "model.layer0.weight": torch.randn(512, 512, generator=g).to(torch.float16),
            "optimizer.exp_avg.embed": torch.randn(2048, 512, generator=g),
            "optimizer.step": torch.tensor(10),
        }
""")

SAVE = STATE + textwrap.dedent("""
    import os, sys, warnings
    import torch.distributed.checkpoint as dcp
    warnings.filterwarnings("ignore")  # One rank without a process group: DCP's no_dist mode.
    root = sys.argv[1]
    dcp.save(state("dcp"), checkpoint_id=os.path.join(root, "iter_0000010", "dcp"))
    torch.save(state("torch"), os.path.join(root, "iter_0000010", "model.pt"))
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("10")
""")

LOAD = STATE + textwrap.dedent("""
    import os, sys, warnings
    import torch.distributed.checkpoint as dcp
    warnings.filterwarnings("ignore")
    root = sys.argv[1]
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        it = int(f.read())
    ckpt = os.path.join(root, f"iter_{it:07d}")
    expected = state("dcp")
    loaded = {k: torch.zeros_like(v) for k, v in expected.items()}
    dcp.load(loaded, checkpoint_id=os.path.join(ckpt, "dcp"))
    for k, v in expected.items():
        assert torch.equal(loaded[k], v), f"dcp: {k} differs"
    got = torch.load(os.path.join(ckpt, "model.pt"), weights_only=True)
    for k, v in state("torch").items():
        assert torch.equal(got[k], v), f"torch.load: {k} differs"
    print("loaded equal", len(expected) + len(got))
""")


def run_python(script, root):
    r = subprocess.run([sys.executable, "-c", script, root], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"python failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def tree(root):
    """Every file under `root` (the private area aside) with its size."""
    found = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not (d == root and x == ".ckptfs")]
        for f in files:
            p = os.path.join(d, f)
            found[os.path.relpath(p, root)] = os.path.getsize(p)
    return found


class RemoteReadTest(RemoteStoreTestCase):
    def options(self, prefix):
        return [f"remote=s3://{BUCKET}/{prefix}", f"remote_endpoint={self.s3.endpoint}",
                "flush_delay=0"]

    def test_an_empty_mount_shows_the_stores_checkpoint_lazily_and_dcp_and_torch_load_it(self):
        prefix = PREFIX + "/restart"
        with CkptfsMount(options=self.options(prefix)) as a:
            run_python(SAVE, a.mnt)
            a.sync()
            sync_remote(a)
            saved = tree(a.backing)
        self.assertIn("iter_0000010/dcp/.metadata", saved)
        self.assertIn("iter_0000010/model.pt", saved)

        with CkptfsMount(options=self.options(prefix)) as b:
            self.assertEqual(tree(b.backing), {}, "the new backing directory is not empty")
            self.assertEqual(sorted(os.listdir(b.mnt)),
                             ["iter_0000010", "latest_checkpointed_iteration.txt"])
            remote = b.stats()["remote"]
            self.assertEqual(remote["directories_listed"], 1, "more than the root was listed")
            self.assertEqual(remote["files_fetched"], 0, "a file was fetched before its open")
            self.assertEqual(os.listdir(os.path.join(b.backing, "iter_0000010")), [],
                             "a directory not looked at was listed")
            # Every file shows with its size before any is fetched.
            self.assertEqual(tree(b.mnt), saved)
            remote = b.stats()["remote"]
            self.assertEqual(remote["files_fetched"], 0)
            self.assertEqual(remote["directories_listed"], 3)

            self.assertIn("loaded equal", run_python(LOAD, b.mnt))
            remote = b.stats()["remote"]
            self.assertEqual(remote["files_fetched"], len(saved), remote)
            self.assertEqual(remote["bytes_fetched"], sum(saved.values()), remote)
            self.assertEqual(remote["directories_listed"], 3, "a directory was listed twice")
            self.assertEqual(remote["names_refused"], 0)
            # The local tier keeps what was fetched: a cache of the store, byte for byte.
            store = self.s3.objects(BUCKET, prefix + "/")
            for rel in saved:
                with open(os.path.join(b.backing, rel), "rb") as f:
                    self.assertTrue(f.read() == store[f"{prefix}/{rel}"], rel)
            self.assertEqual(sorted(os.listdir(os.path.join(b.backing, ".ckptfs", "staging"))),
                             [])

    def test_a_reused_backing_directory_shows_the_stores_newer_versions_not_its_own_older_ones(
            self):
        prefix = PREFIX + "/reuse"
        dir1 = tempfile.mkdtemp(prefix="ckptfs-reuse-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, dir1, ignore_errors=True)
        options = self.options(prefix) + ["remote_part_size=5M"]

        def version(tag):
            # The same names and sizes in both versions; one file large enough for a multipart
            # upload (three parts), a small one, and the tracker file loaders read first.
            return {"iter_0000010/model.bin": distinct_content(tag + "model", 12 * MiB + 7),
                    "iter_0000010/common.pt": distinct_content(tag + "common", 4096),
                    "latest_checkpointed_iteration.txt": tag.encode()}

        def save(m, files):
            os.makedirs(m.path("iter_0000010"), exist_ok=True)
            for rel, data in files.items():
                write(m.path(rel), data)
            m.sync()
            sync_remote(m)

        v1, v2 = version("v1"), version("v2")
        with CkptfsMount(options=options, backing=dir1) as a:
            save(a, v1)
        # Mounted again with nothing new on the store: its own uploads are the store's objects.
        with CkptfsMount(options=options, backing=dir1) as a:
            self.assertEqual(tree(a.mnt), {rel: len(data) for rel, data in v1.items()})
            remote = a.stats()["remote"]
            self.assertEqual(remote["local_files_replaced"], 0, remote)
            self.assertEqual(remote["directories_listed"], 2, remote)
        with CkptfsMount(options=options) as b:  # Another node, an empty backing directory.
            self.assertEqual(tree(b.mnt), {rel: len(data) for rel, data in v1.items()})
            save(b, v2)
        store = self.s3.objects(BUCKET, prefix + "/")
        for rel, data in v2.items():
            self.assertTrue(store[f"{prefix}/{rel}"] == data, rel)

        with CkptfsMount(options=options, backing=dir1) as a:
            with open(a.path("latest_checkpointed_iteration.txt"), "rb") as f:
                self.assertEqual(f.read(), b"v2")
            for rel, data in v2.items():
                with open(a.path(rel), "rb") as f:
                    self.assertTrue(f.read() == data, f"{rel} is not the store's newer version")
            remote = a.stats()["remote"]
            self.assertEqual(remote["local_files_replaced"], len(v2), remote)
            self.assertEqual(remote["files_fetched"], len(v2), remote)
            self.assertEqual(remote["files_uploaded"], 0, remote)
        # The backing directory is a cache of the store again: the newer versions, recorded.
        for rel, data in v2.items():
            with open(os.path.join(dir1, rel), "rb") as f:
                self.assertTrue(f.read() == data, rel)
            self.assertNotIn(PLACEHOLDER_ATTR, os.listxattr(os.path.join(dir1, rel)))

        # Mounted again with nothing new on the store: every local file is the store's, kept.
        with CkptfsMount(options=options, backing=dir1) as a:
            self.assertEqual(tree(a.mnt), {rel: len(data) for rel, data in v2.items()})
            remote = a.stats()["remote"]
            self.assertEqual(remote["local_files_replaced"], 0, remote)
            self.assertEqual(remote["files_fetched"], 0, remote)

    def test_a_file_on_the_store_is_fetched_as_it_is_read_in_ranges(self):
        prefix = PREFIX + "/ranges"
        data = distinct_content("ranges", 40 * MiB + 123)
        self.s3.client().put_object(Bucket=BUCKET, Key=f"{prefix}/step/__0_0.distcp", Body=data)
        with CkptfsMount(options=self.options(prefix)) as m:
            backing_file = os.path.join(m.backing, "step", "__0_0.distcp")
            with open(m.path("step", "__0_0.distcp"), "rb") as f:
                self.assertEqual(os.fstat(f.fileno()).st_size, len(data))
                f.seek(len(data) - 4096)
                self.assertTrue(f.read() == data[-4096:])
                remote = m.stats()["remote"]
                # The last range (8 MiB ranges, the last one 123 bytes past 40 MiB), not all.
                self.assertLess(remote["bytes_fetched"], len(data) // 2, remote)
                self.assertEqual(remote["files_fetched"], 0, remote)
                self.assertIn(PLACEHOLDER_ATTR, os.listxattr(backing_file))
                f.seek(0)
                self.assertTrue(f.read() == data)
            remote = m.stats()["remote"]
            self.assertEqual(remote["bytes_fetched"], len(data), remote)
            self.assertEqual(remote["files_fetched"], 1, remote)
            self.assertNotIn(PLACEHOLDER_ATTR, os.listxattr(backing_file))
            with open(backing_file, "rb") as f:
                self.assertTrue(f.read() == data)

    def test_a_directory_made_through_the_mount_shows_only_what_the_mount_writes(self):
        prefix = PREFIX + "/made"
        with CkptfsMount(options=self.options(prefix)) as m:
            self.assertEqual(os.listdir(m.mnt), [])
            # Objects another node put under a name this mount then makes itself.
            self.s3.client().put_object(Bucket=BUCKET, Key=f"{prefix}/step_2/stale.bin",
                                        Body=b"from an earlier run")
            os.mkdir(m.path("step_2"))
            with open(m.path("step_2", "new.bin"), "wb") as f:
                f.write(b"this run")
            self.assertEqual(os.listdir(m.path("step_2")), ["new.bin"])

    def test_names_on_the_store_that_are_not_one_plain_name_are_refused_not_followed(self):
        prefix = PREFIX + "/hostile"
        client = self.s3.client()
        for key in [f"{prefix}/../escape.bin", f"{prefix}//abs.bin", f"{prefix}/./dot.bin",
                    f"{prefix}/{'n' * 300}", f"{prefix}/d/../../up.bin", f"{prefix}/fine.bin",
                    f"{prefix}/d/ok.bin"]:
            client.put_object(Bucket=BUCKET, Key=key, Body=b"bytes of " + key.encode())
        with CkptfsMount(options=self.options(prefix)) as m:
            self.assertEqual(sorted(os.listdir(m.mnt)), ["d", "fine.bin"])
            self.assertEqual(os.listdir(m.path("d")), ["ok.bin"])
            with open(m.path("fine.bin"), "rb") as f:
                self.assertEqual(f.read(), f"bytes of {prefix}/fine.bin".encode())
            remote = m.stats()["remote"]
            self.assertGreaterEqual(remote["names_refused"], 5, remote)
            outside = os.path.dirname(m.backing)
            for d in (outside, os.path.dirname(outside)):
                for name in ("escape.bin", "up.bin", "abs.bin"):
                    self.assertFalse(os.path.exists(os.path.join(d, name)), f"{d}/{name}")
            self.assertEqual(tree(m.backing), {"fine.bin": len(f"bytes of {prefix}/fine.bin"),
                                               "d/ok.bin": len(f"bytes of {prefix}/d/ok.bin")})
            self.assertNotIn("Traceback", m.output())

    def test_with_local_size_the_oldest_checkpoints_on_the_store_are_evicted_and_read_back(self):
        prefix = PREFIX + "/evict"
        backing = tempfile.mkdtemp(prefix="ckptfs-evict-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, backing, ignore_errors=True)
        data = {}
        with CkptfsMount(options=self.options(prefix) + ["local_size=5M"], backing=backing) as m:
            for step in (1, 2, 3):
                for i in range(2):
                    rel = f"step_{step}/shard_{i}.distcp"
                    data[rel] = distinct_content(rel, MiB)
                    write(m.path(rel), data[rel])
                m.sync()
                sync_remote(m)  # The steps reach the store in order.
            write(m.path("latest.txt"), b"3")
            m.sync()
            sync_remote(m)
            deadline = time.monotonic() + 60
            while m.stats()["remote"]["files_evicted"] < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            remote = m.stats()["remote"]
            # 6 MiB on the store, 5 MiB kept: step_1, the oldest, goes whole; nothing more.
            self.assertEqual(remote["files_evicted"], 2, remote)
            self.assertEqual(remote["bytes_evicted"], 2 * MiB, remote)
            for rel in data:
                path = os.path.join(backing, rel)
                st = os.stat(path)
                self.assertEqual(st.st_size, MiB, rel)
                evicted = rel.startswith("step_1/")
                self.assertEqual(PLACEHOLDER_ATTR in os.listxattr(path), evicted, rel)
                if evicted:
                    self.assertLess(st.st_blocks * 512, MiB, f"{rel}: its blocks are not freed")
            # Still listed, and read back equal through the mount (step_1 fetched from the store;
            # read last: fetched, it is the newest on the store and step_2 may go instead).
            self.assertEqual(sorted(os.listdir(m.path("step_1"))),
                             ["shard_0.distcp", "shard_1.distcp"])
            for rel, d in sorted(data.items(), reverse=True):
                with open(m.path(rel), "rb") as f:
                    self.assertTrue(f.read() == d, rel)
            self.assertEqual(m.stats()["remote"]["files_fetched"], 2)
            with open(os.path.join(backing, "step_1", "shard_0.distcp"), "rb") as f:
                self.assertTrue(f.read() == data["step_1/shard_0.distcp"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
