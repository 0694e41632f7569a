"""Replication over a slow, lossy link to a partner with little room (-o shared,replicas=1, two
nodes as network namespaces, ckptfs_testing.netns): the owner's link is slow and loses packets
(tc's token bucket filter at 200 Mbit/s, 1% dropped by nftables: this kernel has no tc netem)
and its partner holds at most 16 MiB of replicas while 64 MiB wait to be replicated.
Every write succeeds; the partner refuses offers it has no room for and never holds more than
its limit; the owner offers again later; once the files are durable `ckptfs sync --replicated`
returns, the partner holds nothing, the backing store has every byte, no daemon logs an error
and both unmount with status 0. Run with only the options replication needs (and flush_delay,
which keeps the files in memory while the partner is full)."""

import os
import unittest

from ckptfs_testing.ckptfs_daemon import CkptfsDaemon, run_ckptfs, wait_for
from ckptfs_testing.netns import NetworkNodes
from test_multinode import make_tmp
from test_replication import write_secret

NODES = ("o", "p")  # The owner and its partner.
FILES, FILE_MIB = 4, 16
REPLICA_MEMORY = 16 << 20
FLUSH_DELAY = "15s"  # The files stay in memory while the partner is full.
TIMEOUT = 120.0


class ReplicationLinkTest(unittest.TestCase):
    def start_node(self, tmp, backing, net, i, extra):
        node = NODES[i]
        mnt = os.path.join(tmp, node)
        os.makedirs(mnt)
        d = CkptfsDaemon(backing, mnt,
                         ["shared", f"node={node}", "replicas=1",
                          f"replication_secret={self.secret}",
                          f"replication_address={net.address(i)}"] + extra,
                         log_file=os.path.join(tmp, f"{node}.log"), wrapper=net.wrapper(i))
        self.addCleanup(d.cleanup)
        d.start()
        return d

    def test_a_slow_lossy_link_to_a_full_partner_holds_replicas_back_and_loses_nothing(self):
        tmp = make_tmp(self, "ckptfs-e2e-replication-links-")
        net = NetworkNodes(self, len(NODES))
        self.secret = os.path.join(tmp, "replication.key")
        write_secret(self.secret, "the group secret of this test's nodes")
        backing = os.path.join(tmp, "backing")
        os.mkdir(backing)
        owner = self.start_node(tmp, backing, net, 0, [f"flush_delay={FLUSH_DELAY}"])
        partner = self.start_node(tmp, backing, net, 1, [f"replica_memory={REPLICA_MEMORY}"])
        for d, other in ((owner, "p"), (partner, "o")):
            wait_for(lambda: [(p["node"], p["connected"])
                              for p in d.stats()["replication"]["partners"]] == [(other, True)],
                     TIMEOUT, lambda: f"{d.mnt} not connected to {other}")
        net.shape(0, rate="200mbit", loss_percent=1)

        data = {f"shard_{i}.bin": os.urandom(FILE_MIB << 20) for i in range(FILES)}
        for name, content in data.items():
            with open(owner.path(name), "wb") as f:
                f.write(content)  # Fails the test if any write fails.
        most_held = 0

        def partner_full_and_offered_again():
            nonlocal most_held
            held = partner.stats()["replication"]
            most_held = max(most_held, held["held_bytes"])
            [link] = owner.stats()["replication"]["partners"]
            return held["offers_refused_full"] >= 1 and link["offers_full"] >= 1

        wait_for(partner_full_and_offered_again, TIMEOUT,
                 lambda: f"no offer refused for room: {partner.stats()['replication']}, "
                         f"{owner.stats()['replication']}")
        self.assertTrue(owner.stats()["replication"]["durable_seq"] <
                        owner.stats()["replication"]["sealed_seq"],
                        "the files were durable before the partner was full")
        synced = run_ckptfs(["sync", "--replicated", owner.mnt], timeout=TIMEOUT)
        self.assertEqual(synced.returncode, 0, synced.stderr)
        owner.sync()
        wait_for(lambda: partner.stats()["replication"]["held_replicas"] == 0, TIMEOUT,
                 lambda: f"the partner holds replicas of durable files: "
                         f"{partner.stats()['replication']}")
        held = partner.stats()["replication"]
        self.assertLessEqual(max(most_held, held["held_bytes"]), held["held_limit"], held)
        self.assertEqual(held["held_limit"], REPLICA_MEMORY, held)
        for name, content in data.items():
            with open(os.path.join(backing, name), "rb") as f:
                self.assertTrue(f.read() == content, f"{name} differs on the backing store")
        [link] = owner.stats()["replication"]["partners"]
        self.assertEqual(link["replicas_unsendable"], 0, link)
        for d in (owner, partner):
            self.assertEqual(d.error_lines(), [], f"{d.mnt} logged errors")
            self.assertEqual(d.unmount(), 0, d.output()[-3000:])


if __name__ == "__main__":
    unittest.main()
