"""The log cleaner: Kafka's compaction rules over kompakt's Kafka-format logs."""

from kompakt.cleaner.cleaner import Cleaner, CleanStats, LocalEngine

__all__ = ["Cleaner", "CleanStats", "LocalEngine"]
