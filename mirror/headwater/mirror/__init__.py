"""MirrorMaker-style mirror: consumes every source cluster and produces into the aggregate cluster."""
