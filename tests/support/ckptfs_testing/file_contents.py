"""Test file contents whose every MiB differs from every other MiB of every file, so that a
misplaced or swapped range shows in a comparison or a checksum."""

MiB = 1 << 20


def distinct_content(name, size):
    """`size` bytes for the file `name`: each MiB holds its file's name and its index."""
    out = bytearray()
    block = 0
    while len(out) < size:
        out += (f"<{name}:{block}>".encode() * (MiB // 8))[:MiB]
        block += 1
    return bytes(out[:size])
