"""Many small files (a zarr checkpoint has thousands of chunk files): 3,000 files through a daemon
whose open-file limit is 1,024 (RLIMIT_NOFILE soft = hard), as on a host whose hard limit is low.
Every file must still become durable: ckptfs must not need one descriptor per file it flushed."""

import unittest

from ckptfs_testing import workloads
from ckptfs_testing.e2e_check import check_workload


class ManyFilesTest(unittest.TestCase):
    def test_more_files_than_descriptors(self):
        check_workload(self, workloads.SmallFiles(3000), nofile=1024)


if __name__ == "__main__":
    unittest.main(verbosity=2)
