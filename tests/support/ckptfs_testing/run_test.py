"""Runs one unittest module for CTest: `python -m ckptfs_testing.run_test test_x[.Class.method]`
from the module's directory (which `-m` puts on the import path, with the module's neighbours).

Exit status: 0 when every test passed, 1 on any failure or when nothing ran, and 77 (the
SKIP_RETURN_CODE the CTest entries declare) when some tests were skipped and none failed, so that
a skipped test is reported as skipped, never as passed.
"""
import sys
import unittest


def main():
    suite = unittest.defaultTestLoader.loadTestsFromName(sys.argv[1])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if not result.wasSuccessful() or result.testsRun == 0:
        return 1
    return 77 if result.skipped else 0


if __name__ == "__main__":  # Worker processes of the tests import this module again.
    sys.exit(main())
