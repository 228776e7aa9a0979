"""Record batches (magic 2), their compression codecs, and legacy message sets (magic 0/1)."""
