"""kompakt: a Kafka-compatible, compaction-first log store."""

__version__ = "0.1.0"
