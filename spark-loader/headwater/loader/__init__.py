"""The nightly PySpark loader: the aggregate cluster into a Parquet warehouse, exactly once."""
