"""Restart on any node with the remote tier (-o remote, a real moto S3 server): a save through a
mount (the e2e check: equal to a plain run), `ckptfs sync --remote`, then a mount of a new empty
backing directory with the same remote loads the checkpoint equal with the library's own loader:
real PyTorch DCP (2 ranks) and Megatron-core dist_checkpointing (torch_dist, loaded with another
tensor-parallel layout)."""

import os
import tempfile
import unittest
from unittest import mock

from ckptfs_testing import workloads
from ckptfs_testing.ckptfs_daemon import CkptfsDaemon, run_ckptfs
from ckptfs_testing.e2e_check import E2E_TMP, check_workload, remove_tmp
from ckptfs_testing.s3_server import CREDENTIALS, MotoServer

BUCKET = "ckpt"


class RemoteRestartTest(unittest.TestCase):
    def check_restart(self, workload, prefix):
        w = workloads.make(workload, for_test=True)
        with MotoServer() as s3, mock.patch.dict(os.environ, CREDENTIALS):
            s3.create_bucket(BUCKET)
            options = ("cache_size=1G", f"remote=s3://{BUCKET}/{prefix}",
                       f"remote_endpoint={s3.endpoint}")

            def loads_from_an_empty_mount(d, backing):
                r = run_ckptfs(["sync", d.mnt, "--remote"], timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr)
                tmp = tempfile.mkdtemp(prefix=f"ckptfs-e2e-restart-{workload}-", dir=E2E_TMP)
                self.addCleanup(remove_tmp, tmp)
                other_backing, other_mnt = os.path.join(tmp, "backing"), os.path.join(tmp, "mnt")
                os.mkdir(other_backing)
                os.mkdir(other_mnt)
                other = CkptfsDaemon(other_backing, other_mnt, options,
                                     log_file=os.path.join(tmp, "daemon.log"))
                self.addCleanup(other.cleanup)
                other.start()
                self.assertEqual(w.load(other_mnt), w.expected_digest(),
                                 "loaded from the store through an empty mount: different data")
                remote = other.stats()["remote"]
                self.assertGreater(remote["files_fetched"], 0, remote)
                self.assertEqual(remote["names_refused"], 0, remote)
                self.assertEqual(other.unmount(), 0, other.output()[-3000:])
                self.assertEqual(other.error_lines(), [], "the daemon logged errors (restart)")

            check_workload(self, w, options=options, after_sync=loads_from_an_empty_mount)

    def test_a_dcp_save_loads_equal_through_an_empty_mount_of_the_same_remote(self):
        self.check_restart("dcp", "dcp-restart")

    def test_a_megatron_torch_dist_save_loads_equal_through_an_empty_mount(self):
        self.check_restart("mcore_torch_dist", "mcore-restart")


if __name__ == "__main__":
    unittest.main(verbosity=2)
