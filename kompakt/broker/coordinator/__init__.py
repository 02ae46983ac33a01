"""The classic consumer-group coordinator (single node) and its Kafka APIs."""

from __future__ import annotations

from kompakt.broker.coordinator.handlers import register

__all__ = ["register"]
