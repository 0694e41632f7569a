"""Real PyTorch DCP and Megatron-core torch_dist saves through a mount with a remote tier
(-o remote, a real moto S3 server): after `ckptfs sync --remote` every object on the store equals
the file the save published in the backing directory byte for byte (.metadata included), no
file is logged as not uploaded, and the backing directory matches the plain run as in every e2e
test (.metadata compared as there)."""

import os
import unittest
from unittest import mock

from ckptfs_testing import workloads
from ckptfs_testing.ckptfs_daemon import run_ckptfs
from ckptfs_testing.e2e_check import check_workload
from ckptfs_testing.s3_server import CREDENTIALS, MotoServer

BUCKET = "ckpt"


class RemoteSaveTest(unittest.TestCase):
    def check_save_reaches_the_store(self, workload, prefix):
        w = workloads.make(workload, for_test=True, **({"scale": 0.5} if workload == "dcp" else {}))
        with MotoServer() as s3, mock.patch.dict(os.environ, CREDENTIALS):
            s3.create_bucket(BUCKET)

            def every_object_equals_its_file(d, backing):
                r = run_ckptfs(["sync", d.mnt, "--remote"], timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr)
                store = s3.objects(BUCKET, prefix + "/")
                files = {}
                for root, dirs, names in os.walk(backing):
                    dirs[:] = [x for x in dirs if not (root == backing and x == ".ckptfs")]
                    for n in names:
                        with open(os.path.join(root, n), "rb") as f:
                            files[prefix + "/" + os.path.relpath(os.path.join(root, n),
                                                                 backing)] = f.read()
                self.assertTrue(any(k.endswith("/.metadata") for k in files), sorted(files))
                self.assertEqual(sorted(store), sorted(files))
                for key, data in files.items():
                    self.assertTrue(store[key] == data, f"{key} differs on the store")
                remote = d.stats()["remote"]
                self.assertEqual(remote["pending_files"], 0, remote)
                self.assertEqual(remote["last_error"], "", remote)
                # DCP's .metadata.tmp, published and renamed in one flush batch, is no warning.
                self.assertNotIn("is not uploaded", d.output())

            check_workload(self, w, options=("cache_size=1G", f"remote=s3://{BUCKET}/{prefix}",
                                              f"remote_endpoint={s3.endpoint}"),
                           after_sync=every_object_equals_its_file)

    def test_a_dcp_save_is_on_the_store_byte_for_byte_after_sync_remote(self):
        self.check_save_reaches_the_store("dcp", "dcp-run")

    def test_a_megatron_torch_dist_save_is_on_the_store_byte_for_byte_after_sync_remote(self):
        self.check_save_reaches_the_store("mcore_torch_dist", "mcore-run")


if __name__ == "__main__":
    unittest.main(verbosity=2)
