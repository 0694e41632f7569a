"""Writer process of the crash test, and the contents it writes (shared with the checker).

    python3 crash_writer.py DIR SEED COUNT LOG

Closes DIR/f0000, f0001, ... in order (each with distinct content of 64 KiB to 1 MiB). After
every 4th data file it publishes a tracker the Megatron way (write tracker.tmp, rename over
tracker); after every 5th it rewrites `meta` in place (O_TRUNC). Every completed step is
appended to LOG. Stops at COUNT files or at the first error (the daemon was killed).
"""

import os
import random
import sys


def data_content(seed, i):
    rng = random.Random(f"{seed}/f{i}")
    size = rng.randint(64 << 10, 1 << 20)
    return f"f{i:04d}:".encode() + rng.randbytes(size - 6)


def tracker_content(seed, i):
    rng = random.Random(f"{seed}/tracker{i}")
    return f"{i}\n".encode() + rng.randbytes(12000)


def meta_content(seed, i):
    rng = random.Random(f"{seed}/meta{i}")
    return f"{i}\n".encode() + rng.randbytes(100_000)


def parse_versioned(data):
    """The version number at the head of tracker/meta content, or None."""
    head = data.split(b"\n", 1)[0]
    return int(head) if head.isdigit() else None


def write_file(path, data):
    """Writes `data` as the whole content of `path` with plain write(2) calls, then closes it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def main():
    d, seed, count, log_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with open(log_path, "a", buffering=1) as log:
        for i in range(count):
            write_file(os.path.join(d, f"f{i:04d}"), data_content(seed, i))
            log.write(f"f{i:04d}\n")
            if i % 4 == 3:
                write_file(os.path.join(d, "tracker.tmp"), tracker_content(seed, i))
                os.rename(os.path.join(d, "tracker.tmp"), os.path.join(d, "tracker"))
                log.write(f"tracker {i}\n")
            if i % 5 == 4:
                write_file(os.path.join(d, "meta"), meta_content(seed, i))
                log.write(f"meta {i}\n")


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        print(f"writer stopped: {e}", file=sys.stderr)
        sys.exit(3)
