import itertools
import logging

import pytest

from kompakt.broker.app import start_test_broker

_counter = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    logging.getLogger("kompakt").setLevel(logging.INFO)
    b = start_test_broker(tmp_path_factory.mktemp("kafka-data"))
    yield b
    b.stop()


@pytest.fixture
def topic_name(request):
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    return f"{base}-{next(_counter)}"
