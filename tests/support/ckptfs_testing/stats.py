"""A mount's stats (.ckptfs/stats) read and checked against the one definition of their keys,
core/stats/stats_schema.json (tests/unit/metrics_text_test.cc checks the daemon against it too).

    stats = read_stats(os.path.join(mnt, ".ckptfs", "stats"))   # raises StatsMismatch

Every key read must be in the schema with the schema's type, and every key of the schema must
be there (but those with "when", which a mount has only then).
"""

import functools
import json
import os

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))), "core", "stats", "stats_schema.json")


class StatsMismatch(AssertionError):
    """Stats that do not match the schema; the message names every difference."""


@functools.lru_cache(maxsize=None)
def load_schema():
    with open(SCHEMA_PATH) as f:
        return json.load(f)


def _is_integer(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_histogram(v):
    return (isinstance(v, dict) and set(v) == {"le", "counts", "sum"}
            and isinstance(v["le"], list) and all(_is_number(b) for b in v["le"])
            and isinstance(v["counts"], list) and all(_is_integer(c) for c in v["counts"])
            and len(v["counts"]) == len(v["le"]) + 1 and _is_number(v["sum"]))


_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "integers": lambda v: isinstance(v, list) and all(_is_integer(i) for i in v),
    "strings": lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
    "histogram": _is_histogram,
    "histograms": lambda v: isinstance(v, dict) and all(_is_histogram(h) for h in v.values()),
    "object": lambda v: isinstance(v, dict),
    "objects": lambda v: isinstance(v, list) and all(isinstance(i, dict) for i in v),
}


def differences(stats, keys=None, where="", older=False):
    """Every difference between `stats` and the schema's `keys` (the whole schema when None):
    keys it lacks (unless `older`: stats of an older build lack the keys added since), keys the
    schema lacks, values of another type."""
    if keys is None:
        keys = load_schema()["keys"]
    out = []
    for key, value in stats.items():
        spec = keys.get(key)
        if spec is None:
            out.append(f"{where}{key} is not in the schema ({SCHEMA_PATH})")
            continue
        check = _TYPES.get(spec["type"])
        if check is None or not check(value):
            out.append(f"{where}{key} is not of type {spec['type']}: {value!r}")
        elif spec["type"] == "object":
            out += differences(value, spec["keys"], f"{where}{key}.", older)
        elif spec["type"] == "objects":
            for item in value:
                out += differences(item, spec["keys"], f"{where}{key}[].", older)
    for key, spec in keys.items():
        if key not in stats and "when" not in spec and not older:
            out.append(f"{where}{key} is missing")
    return out


def check_stats(stats, older=False):
    """Returns `stats`; raises StatsMismatch naming every difference from the schema."""
    found = differences(stats, older=older)
    if found:
        raise StatsMismatch("the stats do not match core/stats/stats_schema.json: " + "; ".join(found))
    return stats


def read_stats(path, older=False):
    """The stats file at `path` (MOUNT/.ckptfs/stats), parsed and checked against the schema
    (`older`: of an older build, which may lack keys). Read in one request: pieces read across an
    upgrade would come from two workers' texts."""
    with open(path, "rb", buffering=0) as f:
        return check_stats(json.loads(f.read(16 << 20)), older)
