"""The transaction coordinator (KIP-98, as Kafka 2.3): ``formats`` (``__transaction_state`` records),
``state`` (the transaction state machine as a table), ``coordinator`` (the requests, loading with
leadership, timeouts) and ``markers`` (WriteTxnMarkers to partition leaders)."""
