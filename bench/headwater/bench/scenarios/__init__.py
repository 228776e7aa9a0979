"""The benchmark scenarios, one module each: produce (1 and 5), consume (2), latency (3), stored
(4), large (6), the acks=all RF=3 rows of 1 and 3 (replicated), mirror (7), load (8), wan (9)
and security (10)."""
