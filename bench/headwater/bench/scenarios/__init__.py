"""The benchmark scenarios, one module each: produce (1 and 5), consume (2), latency (3), stored
(4), large (6), and the acks=all RF=3 rows of 1 and 3 (replicated)."""
