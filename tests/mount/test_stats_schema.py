"""The stats keys are defined once, in core/stats/stats_schema.json: a mount's stats, under the default
options, in the shared mode with replicas, and in the shared mode over a remote tier (a real moto
S3 server; replicas and a remote are not taken together), hold exactly its keys with its types
(every d.stats() of every test checks this too, through ckptfs_testing.stats), and the check
names each key that is renamed, added, retyped or missing."""

import copy
import os
import tempfile
import unittest
from unittest import mock

from ckptfs_testing.harness import CkptfsMount, require_fuse
from ckptfs_testing.s3_server import CREDENTIALS, MotoServer
from ckptfs_testing.stats import differences, load_schema, read_stats


class StatsSchemaTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def saved_stats(self, options):
        with CkptfsMount(options=options) as m:
            with open(m.path("model.pt"), "wb") as f:
                f.write(b"x" * (1 << 20))
            m.sync()
            return read_stats(m.path(".ckptfs", "stats"))

    def test_a_mount_under_the_default_options_writes_the_schemas_keys(self):
        stats = self.saved_stats([])
        self.assertEqual(differences(stats), [])
        self.assertIn("worker", stats)
        self.assertIn("fuse_request_seconds", stats)
        self.assertEqual(stats["bytes_written"], 1 << 20)

    def test_shared_mounts_with_replicas_and_with_a_remote_write_every_key_of_the_schema(self):
        secret = tempfile.NamedTemporaryFile("w", prefix="ckptfs-schema-", suffix=".key")
        self.addCleanup(secret.close)
        os.chmod(secret.name, 0o600)
        secret.write("the group secret of the schema test\n")
        secret.flush()
        replicated = self.saved_stats(["shared", "node=n0", "replicas=1",
                                       f"replication_secret={secret.name}",
                                       "replication_address=127.0.0.1"])
        with MotoServer() as s3, mock.patch.dict(os.environ, CREDENTIALS):
            s3.create_bucket("schema")
            remote = self.saved_stats(["shared", "node=n0", "remote=s3://schema/run",
                                       f"remote_endpoint={s3.endpoint}"])
        for stats in (replicated, remote):
            self.assertEqual(differences(stats), [])
        for key, spec in load_schema()["keys"].items():
            holders = [stats for stats in (replicated, remote) if key in stats]
            self.assertTrue(holders, key)
            if spec["type"] == "object":
                for stats in holders:
                    self.assertEqual(sorted(stats[key]), sorted(spec["keys"]), key)

    def test_each_key_renamed_added_retyped_or_missing_is_named(self):
        stats = self.saved_stats(["shared", "node=n0"])
        changed = copy.deepcopy(stats)
        changed["bytes_writen"] = changed.pop("bytes_written")
        changed["shared"]["held_markers"] = "2"
        changed["shared"]["members"][0]["beat_age"] = 1
        del changed["worker"]["pid"]
        changed["flush_seconds"]["counts"].pop()
        found = differences(changed)
        expected = ["bytes_writen is not in the schema", "bytes_written is missing",
                    "flush_seconds is not of type histogram",
                    "shared.held_markers is not of type integer",
                    "shared.members[].beat_age is not in the schema", "worker.pid is missing"]
        self.assertEqual(len(found), len(expected), found)
        for difference in expected:
            self.assertTrue(any(f.startswith(difference) for f in found), (difference, found))


if __name__ == "__main__":
    unittest.main()
