"""Response headers written without kio's entity writer are the bytes kio writes, for
every API and version the broker serves (Kafka's ResponseHeader v0: correlation id; v1:
and an empty tagged-field section; ApiVersions always v0, KIP-511)."""

from __future__ import annotations

import io

from kio.serial import entity_writer

from kompakt.broker.handlers import register_all
from kompakt.broker.protocol import response_header, schemas
from kompakt.broker.registry import ApiRegistry


def test_response_headers_match_kios_for_every_served_version():
    registry = register_all(ApiRegistry())
    checked = 0
    for api_key in registry.keys():
        api = registry.get(api_key)
        for version in range(api.min_version, api.max_version + 1):
            found = schemas(api_key, version)
            if found is None:
                continue
            header_cls = found[1].__header_schema__
            kio = io.BytesIO()
            entity_writer(header_cls)(kio, header_cls(correlation_id=-123456789))
            assert response_header(found[1], -123456789) == kio.getvalue(), (api_key, version)
            checked += 1
    assert checked > 100
