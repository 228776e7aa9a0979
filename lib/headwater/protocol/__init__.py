"""The Kafka wire protocol: primitives, API schemas, record batches. No I/O happens here."""
