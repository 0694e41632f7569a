"""`ckptfs upgrade` while real saves run (fs/supervisor.h, core/recovery/handoff.h): torch.save with its
tracker, PyTorch DCP with its fsyncs, Megatron-core's torch_dist, the zarr distributed-optimizer
pattern (without the fine grid, whose open views a handoff waits for) and 2,000 small files. The
mount's worker is replaced at seeded random moments during each save (printed;
CKPTFS_UPGRADE_SEED replays them); every save completes without an error, and the whole e2e
check holds (e2e_check.py): through the mount and, after `ckptfs sync`, on the backing store,
the checkpoint is byte-identical to the same save on a plain directory."""

import os
import random
import time
import unittest

from ckptfs_testing import workloads
from ckptfs_testing.ckptfs_daemon import run_ckptfs
from ckptfs_testing.e2e_check import check_workload


def choose_seed():
    seed = int(os.environ.get("CKPTFS_UPGRADE_SEED") or random.randrange(1 << 30))
    print(f"\nupgrade seed: {seed} (set CKPTFS_UPGRADE_SEED={seed} to replay)", flush=True)
    return seed


class UpgradeDuringSavesTest(unittest.TestCase):
    def check(self, w, **kw):
        rng = random.Random(choose_seed())
        during = []  # Upgrades started while the save ran.

        def upgrades(d, saving):
            # The first upgrade starts early: the small files' save takes only about 0.3 s.
            time.sleep(rng.uniform(0.0, 0.05))
            while saving.is_set():
                during.append(time.monotonic())
                r = run_ckptfs(["upgrade", d.mnt, "--timeout", "300"], timeout=330)
                self.assertEqual(r.returncode, 0, f"ckptfs upgrade: {r.stdout}{r.stderr}")
                time.sleep(rng.uniform(0.05, 1.0))

        stats = check_workload(self, w, while_saving=upgrades, **kw)
        self.assertGreaterEqual(len(during), 1, "no upgrade ran during the save")
        self.assertEqual(stats["worker"]["handoffs"], len(during))
        self.assertEqual(stats["worker"]["crashes"], 0)
        print(f"[{w.name}] {len(during)} upgrades during the save; the last took "
              f"{stats['worker']['takeover_ms']:.1f} ms", flush=True)

    # Under the default options the cache is in shared memory (unsealed bytes handed over in
    # place); the small files with a private cache (handed over through files; README:
    # cache_memory).
    def test_torch_save_with_its_tracker(self):
        self.check(workloads.make("torch_legacy", for_test=True), options=("cache_size=1G",))

    def test_dcp_with_fsyncs(self):
        self.check(workloads.make("dcp", for_test=True), options=("cache_size=1G",))

    def test_megatron_torch_dist(self):
        self.check(workloads.make("mcore_torch_dist", for_test=True))

    def test_zarr_distributed_optimizer(self):
        # Without the fine grid: a handoff waits while a view of it is open (README).
        self.check(workloads.make("zarr_distopt", for_test=True),
                   options=("cache_size=1G", "zarr_chunk=0"))

    def test_small_files_with_a_private_cache(self):
        self.check(workloads.make("small", for_test=True), options=("cache_memory=private",))


if __name__ == "__main__":
    unittest.main(verbosity=2)
