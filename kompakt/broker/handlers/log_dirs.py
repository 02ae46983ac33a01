"""DescribeLogDirs (API 35): each log dir, its partitions, and the error of a failed one.

Kafka's ``ReplicaManager.describeLogDirs``: an online dir answers NONE with its
partitions' sizes (of the topics asked for, or all when ``topics`` is null) and, from
v4, the volume's total and usable bytes; an offline dir answers KAFKA_STORAGE_ERROR with
no topics. Versions 1-4 as Kafka 4 serves them (v0 was removed with Kafka 4.0, KIP-896).
"""

from __future__ import annotations

import os
from typing import Any

from kio.schema.describe_log_dirs.v1.request import DescribeLogDirsRequest
from kio.schema.errors import ErrorCode

from kompakt.broker.registry import ApiRegistry
from kompakt.broker.state import RequestContext

UNKNOWN_BYTES = -1  # DescribeLogDirsResult total_bytes/usable_bytes when not known


def _volume(path: Any) -> tuple[int, int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return UNKNOWN_BYTES, UNKNOWN_BYTES
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def handle_describe_log_dirs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    logs = ctx.logs
    wanted: dict[str, set[int]] | None = None
    if req.topics is not None:
        wanted = {t.topic: {int(p) for p in t.partitions} for t in req.topics}
    offline = logs.offline_dirs()
    results = []
    for d, plogs in logs.logs_by_dir(online_only=False):
        path = str(d.path.resolve())
        if d.path in offline:
            results.append({"error_code": ErrorCode.kafka_storage_error, "log_dir": path})
            continue
        topics: dict[str, list[dict[str, Any]]] = {}
        for plog in plogs:
            if wanted is not None and plog.partition not in wanted.get(plog.topic, ()):
                continue
            topics.setdefault(plog.topic, []).append(
                {
                    "partition_index": plog.partition,
                    "partition_size": plog.size_bytes(),
                    "offset_lag": 0,  # the high watermark is the log end offset here
                    "is_future_key": False,
                }
            )
        total, usable = _volume(d.path)
        results.append(
            {
                "error_code": ErrorCode.none,
                "log_dir": path,
                "topics": [
                    {"name": name, "partitions": sorted(ps, key=lambda p: p["partition_index"])}
                    for name, ps in sorted(topics.items())
                ],
                "total_bytes": total,
                "usable_bytes": usable,
            }
        )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": results}


def register(registry: ApiRegistry) -> None:
    registry.register(DescribeLogDirsRequest.__api_key__, 1, 4, handle_describe_log_dirs)
