"""Headwater's own client library and CLI against real broker processes and ZooKeeper: the client,
producer audit counts, ZooKeeper discovery and the ZooKeeper high-level consumer, the CLI."""
