"""One real broker process through the wire: bad input, crash safety, retention, topic configs.
(Stock Kafka clients' compatibility is tests/compat; Headwater's own client is tests/headwater_client.)"""
