"""The ckptfs benchmark (scripts/bench/run): one module per mode (saves, multinode, memory,
takeover, fuse_ring, tensor_view), the save comparison's report apart; cli says what each
measures (--help prints it)."""
