"""Test harness: a real ZooKeeper and real broker processes, with fault hooks."""
