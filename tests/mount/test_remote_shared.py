"""Several nodes without a shared filesystem (-o shared with -o remote): three mounts over three
empty local directories and one bucket, each node reaching the store through its own
fault-injecting proxy, meet and commit on the store (PREFIX/.ckptfs/shared/). A real DCP save of 3
ranks, one per mount: its marker (.metadata) and Megatron's tracker are put on the store only after
every node's objects are complete there (checked on the proxies' request logs, with one node's
uploads held back for a while). kill -9 of one node while its uploads are held: the save's markers
never reach the store, and the next save, of the live nodes, commits. The mounts take only the
options the promise needs: shared, a node name each (they share one host name here), the remote
and its endpoint."""

import os
import threading
import time
import unittest
from urllib.parse import unquote

from ckptfs_testing import workloads
from ckptfs_testing.harness import CkptfsMount, wait_for
from ckptfs_testing.remote_tests import BUCKET, RemoteStoreTestCase, sync_remote
from ckptfs_testing.s3_server import FaultProxy

NODES = ("n0", "n1", "n2")
MARKERS = (".metadata", workloads.TRACKER)
# The default member_timeout (10 s): a dead member fails a commit once it is judged dead and that
# judgement is member_timeout old. Bound on waiting for it: a hang, not a speed.
COMMIT_FAILS_WITHIN = 120
# Long enough for the other nodes' uploads and their acknowledgements to be done while the held
# node's are not; the check is on the order of requests, not on this time.
HELD_FOR = 4.0


def key_of(path):
    """The object key a proxied path-style request names."""
    return unquote(path.split("?", 1)[0]).lstrip("/").split("/", 1)[1]


class RemoteSharedTest(RemoteStoreTestCase):
    def start_nodes(self, prefix, expect_errors=()):
        """Three mounts, each with its own empty backing directory and proxy: (mounts, proxies)."""
        proxies, mounts = [], []
        for node in NODES:
            proxy = FaultProxy(self.s3.endpoint).__enter__()
            self.addCleanup(proxy.__exit__, None, None, None)
            m = CkptfsMount(options=["shared", f"node={node}", f"remote=s3://{BUCKET}/{prefix}",
                                     f"remote_endpoint={proxy.endpoint}"],
                            expect_errors=expect_errors)
            m.__enter__()
            self.addCleanup(m.__exit__, None, None, None)
            proxies.append(proxy)
            mounts.append(m)
        wait_for(lambda: all(len(m.stats()["shared"]["members"]) == len(NODES) for m in mounts),
                 30, lambda: "every mount to see the three members")
        return mounts, proxies

    def uploads(self, proxies, under):
        """{key: (first request's start, last request's end)} of the object requests (PUT, POST)
        under `under` that the store answered with success, over every proxy."""
        spans = {}
        for proxy in proxies:
            with proxy.lock:
                log = list(proxy.log)
            for start, end, method, path, status, _ in log:
                key = key_of(path)
                if method in ("PUT", "POST") and status < 300 and key.startswith(under):
                    first, last = spans.get(key, (start, end))
                    spans[key] = (min(first, start), max(last, end))
        return spans

    def load_on_a_new_node(self, w, prefix, checkpoint):
        """The digest of `checkpoint` loaded through a mount of an empty directory with the same
        remote (a node that saved none of it)."""
        with CkptfsMount(options=[f"remote=s3://{BUCKET}/{prefix}",
                                  f"remote_endpoint={self.s3.endpoint}"]) as fresh:
            return w.load(fresh.path(checkpoint))

    def test_a_three_node_dcp_save_puts_its_markers_on_the_store_only_after_every_nodes_data(self):
        prefix = "shared/ordered"
        mounts, proxies = self.start_nodes(prefix)
        # n2's data uploads wait: were markers not held for them, they would go first.
        proxies[2].inject("delay", method="PUT", query_part="iter_0000001/__2_", count=1000,
                          delay=HELD_FOR)
        w = workloads.make("dcp", for_test=True)
        w.save([m.mnt for m in mounts], ranks=len(NODES), iteration=1)
        for m in mounts:
            sync_remote(m, timeout=300)
        store = self.s3.objects(BUCKET, prefix + "/")
        spans = self.uploads(proxies, prefix + "/")
        checkpoint = f"{prefix}/iter_0000001/"
        data = [k for k in store if k.startswith(checkpoint) and not k.endswith("/.metadata")]
        for r in range(len(NODES)):
            self.assertIn(f"{checkpoint}__{r}_0.distcp", data, f"rank {r}'s file is not uploaded")
        for marker in (checkpoint + ".metadata", f"{prefix}/{workloads.TRACKER}"):
            self.assertIn(marker, store, f"{marker} is not on the store after sync --remote")
            latest_data_end = max(spans[k][1] for k in data)
            self.assertGreater(spans[marker][0], latest_data_end,
                               f"{marker} was put before every node's objects were complete: "
                               + ", ".join(f"{k} {spans[k]}" for k in sorted(data)))
        # Every object equals the file of the node that wrote it.
        for key in data:
            rel = key[len(prefix) + 1:]
            holders = [m for m in mounts if os.path.exists(os.path.join(m.backing, rel))]
            self.assertEqual(len(holders), 1, f"{rel} is in {len(holders)} backing directories")
            with open(os.path.join(holders[0].backing, rel), "rb") as f:
                self.assertTrue(f.read() == store[key], f"{key} differs from its node's file")
        self.assertEqual(self.load_on_a_new_node(w, prefix, "iter_0000001"), w.expected_digest())
        for node, m in zip(NODES, mounts):
            shared = m.stats()["shared"]
            self.assertEqual((shared["commits_failed"], shared["pending_commits"],
                              shared["acks_owed"]), (0, [], 0), f"{node}: {shared}")
        self.assertGreaterEqual(mounts[0].stats()["shared"]["commits_published"], 2)
        for m in mounts:
            self.assertEqual(m.unmount(), 0, m.output()[-3000:])
        self.assertEqual(sorted(k for k in self.s3.objects(BUCKET, f"{prefix}/.ckptfs/")), [],
                         "member or commit objects left on the store after every node left")

    def test_a_node_killed_before_its_uploads_fails_the_commit_and_the_next_save_commits(self):
        prefix = "shared/killed"
        mounts, proxies = self.start_nodes(prefix, expect_errors=[r"commit of .* failed"])
        # n2 never gets its data onto the store: its PUTs are held until it is killed.
        proxies[2].inject("delay", method="PUT", query_part="iter_0000001/__2_", count=1000,
                          delay=3600)
        w = workloads.make("dcp", for_test=True)
        w.save([m.mnt for m in mounts], ranks=len(NODES), iteration=1)
        wait_for(lambda: proxies[2].injected.get("delay", 0) > 0, 60,
                 lambda: "n2 to start uploading its files")

        def n2_has_seen_a_commit():
            n0, n2 = mounts[0].stats()["shared"], mounts[2].stats()["shared"]
            return n2["acks_owed"] > 0 or n0["commits_published"] > 0 or any(
                "n2" not in c["waiting_for"] for c in n0["pending_commits"])
        # Killed once it has seen rank 0's commit request, which it cannot acknowledge before its
        # files are on the store.
        wait_for(n2_has_seen_a_commit, 60, lambda: "n2 to see n0's commit request")
        mounts[2].kill9()
        first = f"{prefix}/iter_0000001/.metadata"
        tracker = f"{prefix}/{workloads.TRACKER}"
        watching = threading.Event()
        seen, failures = [], []

        def watch():
            """Lists the store until told to stop, recording either marker of the first save."""
            c = self.s3.client()
            while not watching.is_set():
                try:
                    keys = {o["Key"] for o in c.list_objects_v2(
                        Bucket=BUCKET, Prefix=prefix + "/").get("Contents", [])}
                except Exception as e:  # Recorded: a watcher that stopped watched nothing.
                    failures.append(repr(e))
                    return
                seen.extend(k for k in (first, tracker) if k in keys)
                time.sleep(0.1)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            wait_for(lambda: mounts[0].stats()["shared"]["commits_failed"] >= 1,
                     COMMIT_FAILS_WITHIN, lambda: "n0's commit to fail for the dead n2")
            wait_for(lambda: mounts[0].stats()["shared"]["pending_commits"] == [],
                     COMMIT_FAILS_WITHIN, lambda: "n0's other commits to be decided")
        finally:
            watching.set()
            watcher.join()
        self.assertEqual(failures, [], "the store could not be watched")
        self.assertEqual(seen, [], "a marker of the save n2 died in reached the store")
        self.assertEqual(mounts[0].stats()["shared"]["commits_published"], 0)
        # The second save: the live nodes only, into the next iteration.
        w.save([mounts[0].mnt, mounts[1].mnt], ranks=2, iteration=2)
        for m in mounts[:2]:
            sync_remote(m, timeout=300)
        store = self.s3.objects(BUCKET, prefix + "/iter_")
        store.update(self.s3.objects(BUCKET, tracker))
        self.assertNotIn(first, store)
        self.assertNotIn(f"{prefix}/iter_0000001/__2_0.distcp", store)
        self.assertIn(f"{prefix}/iter_0000002/.metadata", store)
        self.assertEqual(store[tracker], b"2")
        self.assertFalse(os.path.exists(os.path.join(mounts[0].backing, "iter_0000001",
                                                     ".metadata")),
                         "the failed commit's marker was published on n0's backing directory")
        self.assertEqual(self.load_on_a_new_node(w, prefix, "iter_0000002"), w.expected_digest())
        for m in mounts[:2]:
            self.assertEqual(m.unmount(), 0, m.output()[-3000:])


if __name__ == "__main__":
    unittest.main()
