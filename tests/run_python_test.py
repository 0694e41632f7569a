"""Runs one unittest module for CTest, from the module's directory.

Exit status: 0 when every test passed, 1 on any failure or when nothing ran, and 77 (the
SKIP_RETURN_CODE the CTest entries declare) when some tests were skipped and none failed, so that
a skipped test is reported as skipped, never as passed.
"""
import os
import sys
import unittest



def main():
    sys.path.insert(0, os.getcwd())
    suite = unittest.defaultTestLoader.loadTestsFromName(sys.argv[1])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if not result.wasSuccessful() or result.testsRun == 0:
        return 1
    return 77 if result.skipped else 0


if __name__ == "__main__":  # Worker processes of the tests import this module again.
    sys.exit(main())
