"""The dynamic configs file (KIP-226 values Kafka keeps in its metadata log): the broker
owner's alone from its first byte, as the SCRAM and ACL stores are, under umask 022."""

from __future__ import annotations

import os
import stat

import pytest

from kompakt.broker.config import BrokerConfig
from kompakt.broker.dynamic_config import DYNAMIC_CONFIGS_FILE, group_layers, save_group_layer
from tests.broker.security.test_secret_files import Poller, umask_022  # noqa: F401

pytestmark = pytest.mark.usefixtures("umask_022")


def test_dynamic_broker_configs_are_never_readable_by_others_while_written(tmp_path):
    """Every rewrite (DynamicBrokerConfig's per-broker and cluster-default layers) is
    created 0600 before a byte: a poller of the data dir never sees group/other bits."""
    cfg = BrokerConfig.from_mapping({"log.dirs": str(tmp_path / "data")})
    path = cfg.data_dir / DYNAMIC_CONFIGS_FILE
    with Poller(path) as poller:
        for i in range(40):
            fresh = cfg.with_dynamic({"log.retention.ms": str(1000 + i)}, {})
            fresh.save_dynamic()
    assert poller.stats > 0
    assert poller.seen == set()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    cfg.load_dynamic()
    assert cfg.get("log.retention.ms") == "1039"


def test_group_configs_share_the_private_file_and_keep_the_broker_section(tmp_path):
    cfg = BrokerConfig.from_mapping({"log.dirs": str(tmp_path / "data")})
    cfg.with_dynamic({"log.retention.ms": "5000"}, {}).save_dynamic()
    path = cfg.data_dir / DYNAMIC_CONFIGS_FILE
    with Poller(path) as poller:
        for i in range(20):
            save_group_layer(path, f"g{i}", {"consumer.session.timeout.ms": "50000"})
    assert poller.seen == set()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len(group_layers(path)) == 20
    cfg.load_dynamic()
    assert cfg.get("log.retention.ms") == "5000"
