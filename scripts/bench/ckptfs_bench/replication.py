"""--replication: how fast a node's staged files reach its partner's memory (-o shared,replicas=1)
against what the link carries (iperf3), over the same veth pair between two network namespaces
(ckptfs_testing.netns; needs root, iproute2 and iperf3).

- iperf3: one TCP stream from node 0 to node 1 for IPERF_SECONDS, its receiver's rate.
- ckptfs: two mounts `-o shared,replicas=1` over one backing directory, node 0 and node 1 each
  in its namespace, bound to its address, flush_delay long enough that nothing is flushed
  meanwhile; --replication-mib (default 1024 x scale) MiB in 4 files written through node 0's
  mount, from the first write until `ckptfs sync --replicated` returns (written into memory and
  replicated into node 1's; the time the writes returned is shown too). Timed the second time on
  the same mounts, the first files removed: the first time (shown apart) also pays the first
  touch of both caches' memory, as the first checkpoint of a job does.
- base (with --baseline CKPTFS): the same with that binary (the previous main): an A/B of a change.
Alternated, --repeat runs, medians; fresh mounts each run."""
import json
import os
import shutil
import subprocess
import time

from ckptfs_testing.ckptfs_daemon import CkptfsDaemon, wait_for
from ckptfs_testing.netns import NetworkNodes

from .measure import medians
from .tables import table

CONTENDERS = ("iperf3", "ckptfs")
FILES = 4
IPERF_SECONDS = 5
NODES = ("r0", "r1")
FLUSH_DELAY = "600s"  # Nothing flushed while the run is timed: the replicas are the only copy.
TIMEOUT = 600.0


class Cleanups:
    """What NetworkNodes registers its removal with, undone in reverse by run()."""

    def __init__(self):
        self.calls = []

    def addCleanup(self, fn, *args):  # noqa: N802 (NetworkNodes takes a test case's method)
        self.calls.append((fn, args))

    def run(self):
        for fn, args in reversed(self.calls):
            fn(*args)


def iperf3_mib_per_s(net):
    server = subprocess.Popen(net.wrapper(1) + ["iperf3", "-s", "-1", "-B", net.address(1)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):  # Until the server listens.
            r = subprocess.run(net.wrapper(0) + ["iperf3", "-c", net.address(1), "-t",
                                                 str(IPERF_SECONDS), "-J"],
                               capture_output=True, text=True, timeout=IPERF_SECONDS + 60)
            received = json.loads(r.stdout or "{}").get("end", {}).get("sum_received")
            if r.returncode == 0 and received:
                return received["bits_per_second"] / 8 / (1 << 20)
            time.sleep(0.1)
        raise RuntimeError("iperf3 could not reach its server: " + r.stderr + r.stdout)
    finally:
        server.kill()
        server.wait()


def ckptfs_run(a, net, secret, mib, binary=None):
    backing = os.path.join(a.workdir, "backing")
    os.makedirs(backing)
    daemons = []
    try:
        for i, node in enumerate(NODES):
            mnt = os.path.join(a.workdir, node)
            os.makedirs(mnt)
            d = CkptfsDaemon(backing, mnt,
                             [f"cache_size={a.cache_size}", "shared", f"node={node}",
                              f"flush_delay={FLUSH_DELAY}", "replicas=1",
                              f"replication_secret={secret}",
                              f"replication_address={net.address(i)}"],
                             log_file=os.path.join(a.workdir, f"{node}.log"),
                             wrapper=net.wrapper(i), binary=binary)
            daemons.append(d)
            d.start()
        for d, partner in zip(daemons, reversed(NODES)):
            wait_for(lambda: [(p["node"], p["connected"])
                              for p in d.stats()["replication"]["partners"]] == [(partner, True)],
                     TIMEOUT, lambda: f"{d.mnt} not connected to {partner}")
        block = os.urandom(1 << 20)
        rec = {}
        for round_name in ("first", "timed"):
            t = time.monotonic()
            for i in range(FILES):
                with open(daemons[0].path(f"{round_name}_{i}.distcp"), "wb") as f:
                    for _ in range(mib // FILES):
                        f.write(block)
            written = time.monotonic() - t
            r = subprocess.run([daemons[0].binary, "sync", daemons[0].mnt, "--replicated"],
                               capture_output=True, text=True, timeout=TIMEOUT)
            replicated = time.monotonic() - t
            if r.returncode != 0:
                raise RuntimeError("ckptfs sync --replicated failed: " + r.stderr)
            if round_name == "first":
                rec["first_seconds"] = replicated
                for i in range(FILES):
                    os.unlink(daemons[0].path(f"first_{i}.distcp"))
        rec.update(seconds=replicated, mib_per_s=mib / replicated, written_seconds=written)
        for d in daemons:
            if d.unmount() != 0:
                raise RuntimeError("ckptfs exited non-zero:\n" + d.output()[-3000:])
        return rec
    finally:
        for d in daemons:
            d.cleanup()
        for node in NODES:
            shutil.rmtree(os.path.join(a.workdir, node), ignore_errors=True)
        shutil.rmtree(backing, ignore_errors=True)


def run(a):
    mib = int(a.replication_mib or 1024 * a.scale)
    mib -= mib % FILES
    cleanups = Cleanups()
    contenders = CONTENDERS + (("base",) if a.baseline else ())
    rows = {c: [] for c in contenders}
    try:
        net = NetworkNodes(cleanups, len(NODES))
        secret = os.path.join(a.workdir, "replication.key")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write("the secret of the bench's nodes\n")
        for rep in range(a.repeat):
            for c in (contenders if rep % 2 == 0 else reversed(contenders)):
                if c == "iperf3":
                    rate = iperf3_mib_per_s(net)
                    rec = {"mib_per_s": rate}
                    print(f"rep {rep + 1} iperf3  {rate:.0f} MiB/s", flush=True)
                else:
                    rec = ckptfs_run(a, net, secret, mib, a.baseline if c == "base" else None)
                    print(f"rep {rep + 1} {c:7s} {rec['seconds']:.2f} s  "
                          f"{rec['mib_per_s']:.0f} MiB/s  (writes returned after "
                          f"{rec['written_seconds']:.2f} s; the first time "
                          f"{rec['first_seconds']:.2f} s)", flush=True)
                rows[c].append(rec)
    finally:
        cleanups.run()
    med = {c: medians(rows[c]) for c in contenders}
    print()
    print(table(["contender", "MiB/s", "x iperf3", "s to replicate", "writes returned s",
                 "first time s"],
                [[c, f"{med[c]['mib_per_s']:.0f}",
                  f"{med[c]['mib_per_s'] / med['iperf3']['mib_per_s']:.2f}",
                  f"{med[c]['seconds']:.2f}" if "seconds" in med[c] else "-",
                  f"{med[c]['written_seconds']:.2f}" if "written_seconds" in med[c] else "-",
                  f"{med[c]['first_seconds']:.2f}" if "first_seconds" in med[c] else "-"]
                 for c in contenders]))
    return {"replication": {c: {"runs": rows[c], "median": med[c]} for c in contenders},
            "mib": mib}
