"""What the mount tests, the end-to-end tests and the bench share, installed into .venv by
scripts/setup.sh (pip install -e tests/support):

    ckptfs_daemon  a ckptfs daemon run in the foreground, and the checks around it (trees,
                   mountinfo, the kernel's settings)
    harness        the mount tests' CkptfsMount, seeds, skips
    stats          a mount's stats read and checked against core/stats/stats_schema.json
    e2e_check      the end-to-end check: a workload on a mount and on a plain directory
    workloads      the checkpoint workloads of the e2e tests and the bench
    run_test       the runner of one test module for CTest
"""
