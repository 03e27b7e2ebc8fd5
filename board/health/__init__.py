"""Fleet health: GPUs gone missing or running hot, retired GPUs, hosts' maintenance windows."""
