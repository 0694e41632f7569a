"""Real PyTorch DCP through a mount with a remote tier (-o remote, a real moto S3 server): after
`ckptfs sync --remote` every object on the store equals the file the save published in the
backing directory byte for byte (.metadata included), and the backing directory matches the plain
run as in every e2e test (.metadata compared as there)."""

import os
import unittest
from unittest import mock

from ckptfs_testing import workloads
from ckptfs_testing.ckptfs_daemon import run_ckptfs
from ckptfs_testing.e2e_check import check_workload
from ckptfs_testing.s3_server import CREDENTIALS, MotoServer

BUCKET = "ckpt"
PREFIX = "dcp-run"


class DCPRemoteTest(unittest.TestCase):
    def test_a_save_is_on_the_store_byte_for_byte_after_sync_remote(self):
        w = workloads.make("dcp", scale=0.5, for_test=True)
        with MotoServer() as s3, mock.patch.dict(os.environ, CREDENTIALS):
            s3.create_bucket(BUCKET)

            def every_object_equals_its_file(d, backing):
                r = run_ckptfs(["sync", d.mnt, "--remote"], timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr)
                store = s3.objects(BUCKET, PREFIX + "/")
                files = {}
                for root, dirs, names in os.walk(backing):
                    dirs[:] = [x for x in dirs if not (root == backing and x == ".ckptfs")]
                    for n in names:
                        with open(os.path.join(root, n), "rb") as f:
                            files[PREFIX + "/" + os.path.relpath(os.path.join(root, n),
                                                                 backing)] = f.read()
                self.assertTrue(any(k.endswith("/.metadata") for k in files), sorted(files))
                self.assertEqual(sorted(store), sorted(files))
                for key, data in files.items():
                    self.assertTrue(store[key] == data, f"{key} differs on the store")
                remote = d.stats()["remote"]
                self.assertEqual(remote["pending_files"], 0, remote)
                self.assertEqual(remote["last_error"], "", remote)

            check_workload(self, w, options=("cache_size=1G", f"remote=s3://{BUCKET}/{PREFIX}",
                                              f"remote_endpoint={s3.endpoint}"),
                           after_sync=every_object_equals_its_file)


if __name__ == "__main__":
    unittest.main(verbosity=2)
