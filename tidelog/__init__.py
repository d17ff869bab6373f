"""Tidelog: a Kafka-style replicated, partitioned log.

This package is everything a user imports: the record-batch codec, errors, the client library,
the CLI and the test harness. Importing it never imports the server packages or pyspark.
"""

__version__ = "0.1.0"
