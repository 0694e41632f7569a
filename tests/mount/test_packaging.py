"""The Debian package as operators install it: built by cpack from this build, installed with
dpkg, run as installed (`--version`, `mount -t fuse.ckptfs` with the generic options of mount,
an fstab line through `mount -T`), its systemd unit verified, then removed without a trace.
It installs the package on this machine (as CI's fresh machines allow) and purges it at the
end, also when it fails; it refuses to run where a ckptfs package is installed already."""

import glob
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from ckptfs_testing.ckptfs_daemon import mount_entry
from ckptfs_testing.harness import ckptfs_bin, force_unmount, mounted, require_fuse, require_root

INSTALLED = "/usr/bin/ckptfs"


def run(args, timeout=120, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kwargs)


def cpack_command(build_dir):
    """The cpack of the cmake that configured `build_dir`."""
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith("CMAKE_CPACK_COMMAND:"):
                return line.split("=", 1)[1].strip()
    return "cpack"


def daemons_of(mnt):
    """PIDs of the ckptfs processes serving `mnt` (started by mount, so found by their command
    line: the supervisor and its worker)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"ckptfs") and mnt.encode() in argv:
            pids.append(int(entry))
    return pids


class PackageTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        require_root()
        self.dir = os.path.realpath(tempfile.mkdtemp(prefix="ckptfs-pkg-"))
        self.addCleanup(shutil.rmtree, self.dir, True)

    def installed_version(self):
        r = run(["dpkg-query", "-W", "-f=${Status}", "ckptfs"])
        return r.returncode == 0 and "install ok installed" in r.stdout

    def build_package(self):
        build_dir = os.path.dirname(os.path.realpath(ckptfs_bin()))
        out = os.path.join(self.dir, "out")
        r = run([cpack_command(build_dir), "--config",
                 os.path.join(build_dir, "CPackConfig.cmake"), "-B", out], timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        debs = glob.glob(os.path.join(out, "ckptfs_*.deb"))
        self.assertEqual(len(debs), 1, os.listdir(out))
        return debs[0]

    def mount_and_save(self, mount_args, mnt, backing, files):
        """Mounts with `mount_args` (the daemon it starts is ckptfs as installed), saves
        `files` (name -> bytes) through it, unmounts, waits for the daemon to end and checks the
        files are in `backing`."""
        self.addCleanup(self.stop_daemons, mnt)
        r = run(mount_args, timeout=60)
        self.assertEqual(r.returncode, 0, f"{mount_args}: {r.stdout}{r.stderr}")
        self.assertTrue(mounted(mnt))
        self.assertEqual(mount_entry(mnt)["fstype"], "fuse.ckptfs")
        daemons = daemons_of(mnt)
        self.assertTrue(daemons)
        for pid in daemons:
            self.assertEqual(os.readlink(f"/proc/{pid}/exe"), INSTALLED)
        for name, data in files.items():
            with open(os.path.join(mnt, name), "wb") as f:
                f.write(data)
                os.fsync(f.fileno())
        r = run(["umount", mnt], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        deadline = time.monotonic() + 60
        while any(os.path.exists(f"/proc/{pid}") for pid in daemons):
            self.assertLess(time.monotonic(), deadline, "the daemon did not end after umount")
            time.sleep(0.05)
        for name, data in files.items():
            with open(os.path.join(backing, name), "rb") as f:
                self.assertEqual(f.read(), data, name)

    def stop_daemons(self, mnt):
        if mounted(mnt):
            force_unmount(mnt)
        for pid in daemons_of(mnt):
            os.kill(pid, 9)

    def purge(self):
        if self.installed_version():
            run(["dpkg", "--purge", "ckptfs"])

    def test_the_package_installs_mounts_through_mount_and_fstab_and_is_removed_cleanly(self):
        if self.installed_version():
            self.fail("a ckptfs package is installed on this machine: this test installs and "
                      "purges its own; remove that one first (dpkg --purge ckptfs)")
        deb = self.build_package()
        fields = run(["dpkg-deb", "-f", deb, "Package", "Version", "Depends"]).stdout
        depends = {d.strip().split(" ")[0] for d in
                   re.search(r"^Depends: (.*)$", fields, re.M).group(1).split(",")}
        for needed in ("fuse3", "libfuse3-3", "liburing2", "libcpp-httplib0.11", "libsystemd0"):
            self.assertIn(needed, depends)
        contents = [line.split()[-1] for line in run(["dpkg-deb", "-c", deb]).stdout.splitlines()
                    if not line.startswith("d")]
        for path in ("./usr/bin/ckptfs", "./usr/lib/systemd/system/ckptfs@.service",
                     "./usr/share/man/man8/ckptfs.8.gz", "./usr/share/doc/ckptfs/README.md"):
            self.assertIn(path, contents)

        self.addCleanup(self.purge)
        r = run(["dpkg", "-i", deb])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(run([INSTALLED, "--version"]).stdout.strip(), "ckptfs 0.1.0")
        self.assertEqual(run(["man", "-w", "ckptfs"]).stdout.strip(),
                         "/usr/share/man/man8/ckptfs.8.gz")
        unit = "/usr/lib/systemd/system/ckptfs@.service"
        r = run(["systemd-analyze", "verify", unit])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(unit) as f:
            self.assertIn(f"ExecStart={INSTALLED} -f ${{BACKING}} %f", f.read())

        backing, mnt = os.path.join(self.dir, "backing"), os.path.join(self.dir, "mnt")
        os.mkdir(backing)
        os.mkdir(mnt)
        log = os.path.join(self.dir, "daemon.log")
        self.mount_and_save(
            ["mount", "-t", "fuse.ckptfs", backing, mnt, "-o",
             f"cache_size=64M,allow_other,log_file={log},rw,dev,suid,exec,nofail,_netdev,"
             "x-systemd.automount,x-systemd.mount-timeout=30"],
            mnt, backing, {"model.pt": os.urandom(3 << 20)})
        fstab = os.path.join(self.dir, "fstab")
        with open(fstab, "w") as f:
            f.write(f"# a node's checkpoint mount\n{backing} {mnt} fuse.ckptfs "
                    f"cache_size=64M,allow_other,log_file={log},nofail,_netdev 0 0\n")
        self.mount_and_save(["mount", "-T", fstab, mnt], mnt, backing,
                            {"latest_checkpointed_iteration.txt": b"100\n",
                             "model.pt": os.urandom(1 << 20)})

        r = run(["dpkg", "--purge", "ckptfs"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(self.installed_version())
        left = [p for p in contents if os.path.lexists(p[1:])]
        self.assertEqual(left, [], "files the package left behind")


if __name__ == "__main__":
    unittest.main()
