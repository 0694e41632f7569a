"""safetensors through ckptfs: save_file of a 1 GiB bf16 model (a hidden .tmpXXXXXX file created
0600, set to its final size with ftruncate, written in order, renamed over model.safetensors
before it is closed) and torch.save of the same weights into model.pt, both loaded back by
mmap (safetensors.torch.load_file, torch.load(mmap=True))."""

import unittest

from ckptfs_testing import workloads
from ckptfs_testing.e2e_check import check_workload


class SafetensorsTest(unittest.TestCase):
    def test_a_model_saved_with_safetensors_and_torch_save_loads_back_by_mmap(self):
        # Both files (2 GiB) are staged in memory at once.
        check_workload(self, workloads.make("safetensors", for_test=True),
                       options=("cache_size=3G",))


if __name__ == "__main__":
    unittest.main(verbosity=2)
