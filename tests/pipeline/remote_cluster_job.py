"""Clean a tiered partition's remote range with the Spark engine on a given master, in
a fresh process that knows only the bucket's URL (no data dir exists); print JSON.

Started by test_remote_cluster.py (a process has one SparkContext, and the test
session's is local). Usage: ``python remote_cluster_job.py MASTER TOPIC CONFIGS NOWS
PLAN=URL...``: on each bucket URL, one clean per NOW (ms, comma-separated), the clean
point reset to the log start between them so the next clean rewrites the whole range
again (KIP-534 horizons); PLAN ``one-task`` or ``spread`` (a task per segment and per
group).
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    master, topic, configs, nows_text = sys.argv[1:5]
    nows = [int(n) for n in nows_text.split(",")]
    buckets = [arg.split("=", 1) for arg in sys.argv[5:]]
    import kompakt.pipeline as pipeline
    from kompakt.cleaner.remote_clean import RemoteCleaner
    from kompakt.pipeline.remote_engine import SparkRemoteEngine
    from kompakt.pipeline.remote_tasks import StoreAddress
    from kompakt.pipeline.standalone import FAST_START_JAVA_OPTS
    from kompakt.remote import open_store
    from kompakt.remote.metadata import RemoteLogMetadataManager
    from kompakt.remote.storage import RemoteStorageManager

    config = {
        "kompakt.spark.master": master,
        "spark.executor.memory": "1g",
        "spark.executor.cores": "1",
        "spark.driver.extraJavaOptions": FAST_START_JAVA_OPTS,
        "spark.executor.extraJavaOptions": FAST_START_JAVA_OPTS,
    }
    spark = pipeline.session(config)
    spark.sparkContext.setLogLevel("ERROR")
    now = [0]
    out: dict = {"cwd": os.getcwd(), "master": spark.sparkContext.master, "cleans": []}
    for plan, url in buckets:
        store = open_store(url)
        segments, meta = RemoteStorageManager(store), RemoteLogMetadataManager(store)
        single = 0 if plan == "spread" else None
        task_bytes = 4096 if plan == "spread" else None  # several read tasks
        engine = SparkRemoteEngine(segments, StoreAddress.here(url), config, single, task_bytes)
        cleaner = RemoteCleaner(segments, meta, lambda: now[0], engine=engine)
        for n in nows:
            now[0] = n
            v = meta.load_partition(topic, 0)
            if v.value.clean_point:
                v = meta.commit_partition(v.value.next(v.value.segments, clean_point=0), v)
            t0 = time.monotonic()
            result = cleaner.clean(v, json.loads(configs), 0)
            out["cleans"].append(
                {
                    "plan": plan,
                    "seconds": round(time.monotonic() - t0, 2),
                    "generation": result.manifest.value.generation,
                    "segments": [s.segment_id for s in result.manifest.value.segments],
                }
            )
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    out["executors"] = executors
    pipeline.stop()
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
