"""multinode: a DCP save of 3 ranks, each through its own mount (-o shared) of one backing
directory, as on 3 nodes over a shared filesystem; timed until the save returns and until its
marker (.metadata) is on the backing store, and with replicas (ckptfs3r; ckptfs3rf with
fsync=replicated) until every member's files are in its partner's memory (`ckptfs sync
--replicated` on each); ckptfs3r-loss: ckptfs3r whose n1 dies (kill -9) once its part is in
its partner's memory and before it is durable, timed from the death until the marker."""
import glob
import os
import shutil
import subprocess
import threading
import time

from ckptfs_testing import workloads
from ckptfs_testing.ckptfs_daemon import mounted, run_ckptfs, wait_for
from ckptfs_testing.workloads import ranks

MULTINODE = "multinode"
MULTINODE_DESCRIPTION = ("PyTorch DCP save, 3 ranks (gloo), each through its own mount "
                         "(-o shared) of one backing directory")
MULTINODE_CONTENDERS = ["plain", "ckptfs1", "ckptfs3", "ckptfs3r", "ckptfs3rf", "ckptfs3r-loss"]
REPLICATED = ("ckptfs3r", "ckptfs3rf", "ckptfs3r-loss")
NODE_LOSS = "ckptfs3r-loss"
# The node that dies in NODE_LOSS (not rank 0's n0, which publishes the marker).
LOST_NODE = "n1"
MULTINODE_NODES = ("n0", "n1", "n2")
MULTINODE_SCALE = 0.5  # Of dcp's size: 512 MiB at --scale 1.
MARKER_POLL = 0.01  # Seconds between looks for the marker on the backing store.
MARKER_TIMEOUT = 300.0


def multinode_workload(scale):
    return workloads.make("dcp", scale=scale * MULTINODE_SCALE)


def run_multinode(bench, contender, w):
    """One run of the multinode workload on `bench` (a saves.Bench): {"save", "marker", ...}."""
    a = bench.args
    rec = {"contender": contender}
    rank_count = len(MULTINODE_NODES)
    if contender == "plain":
        backing = os.path.join(bench.workdir, "plain", MULTINODE)
        os.makedirs(backing)
        roots = [backing] * rank_count
    else:
        backing = os.path.join(bench.workdir, "backing", MULTINODE)
        os.makedirs(backing)
    daemons = []
    os.sync()
    try:
        if contender == "ckptfs1":
            os.makedirs(os.path.join(bench.workdir, "mnt"), exist_ok=True)
            daemons.append(bench.mount(backing, os.path.join(bench.workdir, "mnt"), "multinode"))
            roots = [daemons[0].mnt] * rank_count
        elif contender in ("ckptfs3",) + REPLICATED:
            extra = replication_options(bench.workdir) if contender in REPLICATED else []
            if contender == "ckptfs3rf":
                extra.append("fsync=replicated")
            for node in MULTINODE_NODES:
                mnt = os.path.join(bench.workdir, node)
                os.makedirs(mnt, exist_ok=True)
                daemons.append(bench.mount(backing, mnt, f"multinode-{node}",
                                           ["shared", f"node={node}"] + extra))
            roots = [d.mnt for d in daemons]
        if a.warm_up:  # As the other workloads' first save: memory faulted in before.
            rec["save_first"] = w.save([os.path.join(r, "first") for r in roots],
                                       ranks=rank_count)
            for d in daemons:
                d.sync()
        sights = os.path.join(backing, ".ckptfs", "shared", "commits", "*", f"seen.{LOST_NODE}")
        earlier_sights = set(glob.glob(sights))
        if contender == NODE_LOSS:
            # Its part cannot become durable (a flush into an immutable staging directory
            # fails): a certain window for its death, whatever the flush speed.
            staging = os.path.join(backing, ".ckptfs", "staging", LOST_NODE)
            chattr("+i", staging)
        watch = MarkerWatch(os.path.join(backing, "timed", ".metadata"))
        rec["save"] = w.save([os.path.join(r, "timed") for r in roots], ranks=rank_count)
        if contender in REPLICATED:
            for d in daemons:
                r = run_ckptfs(["sync", d.mnt, "--replicated"], timeout=MARKER_TIMEOUT)
                if r.returncode != 0:
                    raise RuntimeError("ckptfs sync --replicated failed: " + r.stderr)
            rec["replicated"] = time.monotonic() - ranks.last_start_line
        if contender == NODE_LOSS:
            # A member that dies before it saw the commit request fails the commit: what it
            # owed is unknown (policy::MayStandIn).
            wait_for(lambda: set(glob.glob(sights)) - earlier_sights, MARKER_TIMEOUT,
                     f"{LOST_NODE}'s sight of the commit request")
            lost = daemons.pop(MULTINODE_NODES.index(LOST_NODE))
            killed_at = time.monotonic()
            lost.kill9()
            lost.cleanup()
            bench.daemons.remove(lost)
            rec["death_to_marker"] = watch.wait(MARKER_TIMEOUT) - killed_at
            chattr("-i", staging)
        seen = watch.wait(MARKER_TIMEOUT) - ranks.last_start_line
        # The plain directory's .metadata is fsynced before its save returns.
        rec["marker"] = rec["save"] if contender == "plain" else seen
        rec["logical_bytes"] = w.logical_bytes()
        for d in daemons:
            d.sync()
        for d in daemons:
            if d.unmount() != 0:
                raise RuntimeError("ckptfs exited non-zero:\n" + d.output()[-3000:])
            bench.check_errors(d)
        daemons = []
    finally:
        if contender == NODE_LOSS:
            chattr("-i", os.path.join(backing, ".ckptfs", "staging", LOST_NODE), check=False)
        for d in daemons:
            d.cleanup()
            if d in bench.daemons:
                bench.daemons.remove(d)
        if not any(mounted(os.path.join(bench.workdir, m)) for m in ("mnt",) + MULTINODE_NODES):
            shutil.rmtree(os.path.dirname(backing), ignore_errors=True)
    return rec


def chattr(flag, path, check=True):
    """chattr FLAG PATH (+i: nothing in the directory can be created, renamed or removed)."""
    subprocess.run(["chattr", flag, path], check=check, capture_output=True)


def replication_options(workdir):
    """-o options of a member with one partner (replicas=1) on this machine: the bench's secret
    (written once, root-only), received on loopback."""
    secret = os.path.join(workdir, "replication.key")
    if not os.path.exists(secret):
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write("the secret of the bench's members\n")
    return ["replicas=1", f"replication_secret={secret}", "replication_address=127.0.0.1"]


class MarkerWatch:
    """Looks for `path` every MARKER_POLL seconds, from a thread, from its creation on."""

    def __init__(self, path):
        self.path = path
        self.seen = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._stop.is_set():
            if os.path.exists(self.path):
                self.seen = time.monotonic()
                return
            time.sleep(MARKER_POLL)

    def wait(self, timeout):
        """time.monotonic() when the path was first seen; raises when not within timeout."""
        self._thread.join(timeout)
        self._stop.set()
        if self.seen is None:
            raise RuntimeError(f"{self.path} did not appear within {timeout:.0f}s")
        return self.seen


