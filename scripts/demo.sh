#!/usr/bin/env bash
# Sets up ckptfs, mounts it over a local backing directory and shows it at work: a checkpoint
# saved with torch.save through the mount, a tracker file written last, the checkpoint's tensors
# read with zarr through its .tensors view, the live figures and a few of its Prometheus metrics,
# a sync, and the backing directory after unmount.
#   scripts/demo.sh [BACKING_DIR] [MOUNTPOINT]   (default: /tmp/ckptfs-demo/{store,mnt})
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
bin="$PWD/${CKPTFS_BUILD_DIR:-build}/ckptfs"
store="${1:-/tmp/ckptfs-demo/store}"
mnt="${2:-/tmp/ckptfs-demo/mnt}"
metrics="$(dirname "$mnt")/ckptfs.prom"
mkdir -p "$store" "$mnt"

"$bin" "$store" "$mnt" -o cache_size=1G,metrics_file="$metrics",metrics_interval=500ms
trap 'mountpoint -q "$mnt" && fusermount3 -u "$mnt"' EXIT
echo "== mounted: $(grep " $mnt " /proc/self/mounts)"

echo "== saving a checkpoint through the mount (torch.save, then the tracker file)"
.venv/bin/python - "$mnt" <<'PY'
import os, sys, time, torch
root = sys.argv[1]
state = {"model": {f"layer{i}.weight": torch.randn(1024, 1024) for i in range(64)},
         "optimizer": {"step": 100, "exp_avg": torch.zeros(4 << 20)}}
d = os.path.join(root, "iter_0000100", "mp_rank_00")
os.makedirs(d, exist_ok=True)
t = time.time()
torch.save(state, os.path.join(d, "model_optim_rng.pt"))
with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
    f.write("100")
print(f"saved {os.path.getsize(os.path.join(d, 'model_optim_rng.pt')) >> 20} MiB in {time.time() - t:.2f} s")
PY
echo "== the tree as the mount shows it"
find "$mnt" | sort
echo "== the checkpoint as tensors: its read-only .tensors view, read with zarr"
view="$mnt/iter_0000100/mp_rank_00/.tensors"
ls "$view/model_optim_rng.pt/model" | head -3
.venv/bin/python - "$view" <<'PY'
import sys, zarr
a = zarr.open(f"{sys.argv[1]}/model_optim_rng.pt/model/layer0.weight", mode="r")
print(f"model/layer0.weight: shape {a.shape}, dtype {a.dtype}, first values {a[0, :3]}")
PY
echo "== live figures (ckptfs status)"
"$bin" status "$mnt"
echo "== ckptfs sync: returns once everything closed so far is durable"
time "$bin" sync "$mnt"
sleep 1
echo "== some of its Prometheus metrics ($metrics; -o metrics=PORT serves them over HTTP)"
grep -E '^ckptfs_(flushed_bytes_total|dirty_bytes|save_to_durable_seconds_(count|sum))' "$metrics"
echo "== unmount (flushes anything left), then the backing directory"
fusermount3 -u "$mnt"
trap - EXIT
sleep 0.5
ls -lR "$store" | grep -v '^total'
