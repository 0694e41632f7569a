"""A minimal inotify reader (ctypes) to observe the order in which names appear in BACKING."""

import ctypes
import os
import select
import struct

IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_CLOSE_WRITE = 0x00000008
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

_libc = ctypes.CDLL(None, use_errno=True)
_EVENT = struct.Struct("iIII")


class Watcher:
    """Records (directory, name, mask) for events on the watched directories, in order."""

    def __init__(self):
        self.fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e), "inotify_init1")
        self.dirs = {}
        self.events = []

    def watch(self, path, mask=IN_MOVED_TO | IN_CREATE):
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e), path)
        self.dirs[wd] = path

    def drain(self, timeout=0.0):
        while True:
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                return self.events
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return self.events
            pos = 0
            while pos < len(buf):
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, pos)
                name = buf[pos + _EVENT.size:pos + _EVENT.size + length].rstrip(b"\0").decode()
                pos += _EVENT.size + length
                self.events.append((self.dirs.get(wd), name, mask))
            timeout = 0.0

    def close(self):
        os.close(self.fd)
