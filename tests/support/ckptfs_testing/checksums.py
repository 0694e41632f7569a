"""The checksum records ckptfs keeps with published files (core/integrity/checksum_record.h):
the extended attribute user.ckptfs.checksum, "crc32c chunk=C size=N sums=h,h,..." (or a directory's
.ckptfs-checksums.json where the backing filesystem keeps no user xattrs), checked here
against PyPI's crc32c, an implementation apart from the daemon's (ISA-L)."""

import json
import os

import crc32c

XATTR = "user.ckptfs.checksum"
# Where a backing filesystem without user xattrs keeps the records of a directory's files.
MANIFEST = ".ckptfs-checksums.json"


def parse_record(text):
    """(chunk, size, [sums]) of a record's text (bytes or str)."""
    if isinstance(text, bytes):
        text = text.decode("ascii")
    kind, chunk, size, sums = text.split(" ")
    assert kind == "crc32c" and chunk.startswith("chunk=") and size.startswith("size="), text
    assert sums.startswith("sums="), text
    sums = sums[len("sums="):]
    return (int(chunk[len("chunk="):]), int(size[len("size="):]),
            [int(s, 16) for s in sums.split(",")] if sums else [])


def record_of(path):
    """The record kept with the file at `path` (its extended attribute, else its entry in its
    directory's manifest), parsed; None when it has none."""
    try:
        return parse_record(os.getxattr(path, XATTR))
    except OSError:
        pass
    try:
        with open(os.path.join(os.path.dirname(path), MANIFEST)) as f:
            manifest = json.load(f)
    except OSError:
        return None
    assert manifest["ckptfs_checksums"] == 1, manifest
    record = manifest["files"].get(os.path.basename(path))
    return None if record is None else parse_record(record)


def sums_of(path, chunk):
    """The CRC32C of each `chunk` bytes of the file at `path`, computed here."""
    sums = []
    with open(path, "rb") as f:
        while piece := f.read(chunk):
            sums.append(crc32c.crc32c(piece))
    return sums


def whole_crc32c(path):
    """The CRC32C of the whole file at `path`, as 8 lowercase hex digits, computed here."""
    crc = 0
    with open(path, "rb") as f:
        while piece := f.read(1 << 24):
            crc = crc32c.crc32c(piece, crc)
    return f"{crc:08x}"


def mismatched_records(root, skip=(".ckptfs",)):
    """{path relative to root: why} for each regular file under `root` (the entries named in
    `skip` at its top left out) whose record is missing or does not match its bytes."""
    wrong = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root:
            dirnames[:] = [d for d in dirnames if d not in skip]
        for name in filenames:
            if name == MANIFEST:
                continue
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            rel = os.path.relpath(path, root)
            record = record_of(path)
            if record is None:
                wrong[rel] = "no checksum record"
                continue
            chunk, size, sums = record
            actual = os.path.getsize(path)
            if size != actual:
                wrong[rel] = f"record says {size} bytes, the file has {actual}"
            elif sums != sums_of(path, chunk):
                wrong[rel] = "sums differ from PyPI crc32c's"
    return wrong
