"""Everything Headwater knows about ZooKeeper, in one place: how to connect (:mod:`.client`) and,
module by module, the paths and JSON documents Kafka 2.3 keeps there.

Broker, client library, mirror, loader, CLI and bench reach ZooKeeper only through this package.
"""
