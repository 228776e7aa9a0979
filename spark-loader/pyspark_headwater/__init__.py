"""``format("headwater")`` without ``spark.dataSource.register``.

PySpark 4 looks for Python data sources when a session first needs one: it imports every top-level
module whose name starts with ``pyspark_`` and registers its ``DefaultSource`` under that class's
``name()`` (``pyspark/sql/worker/lookup_data_sources.py``). Installing Headwater (with the
``loader`` extra) puts this module on the path, so any session of that Python can read and write
``format("headwater")`` as it would ``format("kafka")``.
"""

from headwater.loader.source import HeadwaterDataSource as DefaultSource

__all__ = ["DefaultSource"]
