"""The controller: one broker, elected through ZooKeeper, that owns partition leadership."""
