"""Every config key kompakt accepts is honoured or declared ignored (issue 13, point 8).

Kafka's ``ConfigDef`` lists only keys the broker acts on; kompakt also accepts Kafka keys
that make no sense on one node so a Kafka ``server.properties`` or a client's topic
config works. Such a key must say so in its table row (``ignored``, with the reason), and
DescribeConfigs' documentation repeats it: a silently unused key lets a user believe a
setting (an fsync interval, a compression level) is in force when it is not.
"""

from __future__ import annotations

import ast
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

import kompakt
from kompakt.broker.config import BROKER_KEYS, BrokerConfig
from kompakt.broker.group_configs import broker_keys_read
from kompakt.log.config import BROKER_LOG_KEYS, CONFIG_DEFS, broker_synonym

SOURCE = Path(kompakt.__file__).parent
IGNORED_NOTE = "Ignored by kompakt:"


@cache
def reads() -> Counter[str]:
    """Every string constant and attribute name used inside a function body in
    ``kompakt/``. Module-level tables (``_define(...)``, the ``BrokerKey`` list, the sets
    of dynamic keys) declare keys and so do not count as reading them."""
    found: Counter[str] = Counter()
    for path in SOURCE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found[node.value] += 1
                elif isinstance(node, ast.Attribute):
                    found[node.attr] += 1
    return found


def is_read(key: str, attribute: bool) -> bool:
    """``key`` appears as a string in code, or (topic configs) as its ``TopicConfig``
    attribute (``segment.bytes`` -> ``cfg.segment_bytes``), or is one the GROUP configs
    read by a computed name (``group.<protocol>.<key>`` and its min/max bounds)."""
    return (
        reads()[key] > 0
        or (attribute and reads()[key.replace(".", "_")] > 0)
        or key in broker_keys_read()
    )


TABLE = [(name, d.ignored, True) for name, d in CONFIG_DEFS.items()] + [
    (name, d.ignored, False) for name, d in BROKER_KEYS.items()
]


@pytest.mark.parametrize("name, ignored, topic", TABLE, ids=[row[0] for row in TABLE])
def test_every_accepted_key_is_read_or_declared_ignored_and_never_both(name, ignored, topic):
    """Topic configs (``CONFIG_DEFS``) and broker keys (``BROKER_KEYS``) alike."""
    if ignored is None:
        assert is_read(name, attribute=topic), f"{name} is accepted but nothing reads it"
    else:
        assert not is_read(name, attribute=topic), f"{name} is read but declared ignored"


def test_broker_topic_defaults_follow_their_topic_config():
    """A ``log.*`` key is honoured through the topic config it is the default of
    (Kafka's ``ServerTopicConfigSynonyms``), so it is ignored exactly when that is."""
    for name in BROKER_LOG_KEYS:
        found = broker_synonym(name)
        assert found is not None, name
        d, _syn = found
        assert d.ignored is None or not is_read(name, attribute=False), name


def test_kafka_keys_unused_until_issue_13_are_honoured_or_declared():
    """The keys the issue names: flush.* and the offset map's load factor are honoured
    now, the rest declared ignored."""
    assert CONFIG_DEFS["flush.messages"].ignored is None
    assert CONFIG_DEFS["flush.ms"].ignored is None
    for name in ("compression.gzip.level", "compression.lz4.level", "compression.zstd.level"):
        assert CONFIG_DEFS[name].ignored
    assert CONFIG_DEFS["preallocate"].ignored
    assert BROKER_KEYS["log.cleaner.io.buffer.load.factor"].ignored is None


def test_documentation_says_which_keys_are_ignored_and_why():
    for d in CONFIG_DEFS.values():
        assert (IGNORED_NOTE in d.documentation) == (d.ignored is not None), d.name
        if d.ignored:
            assert d.documentation.endswith(d.ignored)
    entries = {e.name: e for e in BrokerConfig.from_mapping({}).describe_entries()}
    for name, e in entries.items():
        ignored = BROKER_KEYS[name].ignored if name in BROKER_KEYS else None
        if name in BROKER_LOG_KEYS:
            ignored = broker_synonym(name)[0].ignored  # type: ignore[index]
        assert (IGNORED_NOTE in e.doc) == (ignored is not None), name
    assert IGNORED_NOTE in entries["log.preallocate"].doc
    assert IGNORED_NOTE in entries["log.cleaner.threads"].doc
    assert IGNORED_NOTE not in entries["log.cleaner.backoff.ms"].doc
