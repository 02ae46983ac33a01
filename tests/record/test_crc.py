"""The compiled CRC-32C is the ``crc32c`` package's bit for bit (Kafka's ``Crc32C``, the
checksum of a v2 batch from ``attributes`` on), by the SSE4.2 instruction and by the
tables that stand in for it on other hosts."""

from __future__ import annotations

import random

import crc32c as reference
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kompakt.record.crc import HARDWARE, crc32c

WAYS = [pytest.param(True, id="instruction"), pytest.param(False, id="tables")]


@pytest.mark.parametrize("hardware", WAYS)
def test_every_length_around_the_block_boundaries_matches_the_package(hardware):
    """Lengths 0-40, and around each join of three streams (3 x 128 and 3 x 2048 bytes)
    and the single stream's 8-byte steps, at every alignment of the first byte."""
    if hardware and not HARDWARE:
        pytest.skip("this host has no SSE4.2")
    rng = random.Random(28)
    lengths = [*range(41), 383, 384, 385, 391, 392, 6143, 6144, 6145, 6144 + 384 + 7, 61000]
    for n in lengths:
        for skip in range(8):
            data = memoryview(rng.randbytes(n + skip))[skip:]
            assert crc32c(data, hardware) == reference.crc32c(data), (n, skip)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=20_000), st.integers(0, 7), st.booleans())
def test_arbitrary_bytes_at_any_alignment_match_the_package(data, skip, hardware):
    view = memoryview(data)[min(skip, len(data)) :]
    assert crc32c(view, hardware) == reference.crc32c(view)


def test_the_empty_input_has_crc_zero():
    assert crc32c(b"") == crc32c(b"", False) == reference.crc32c(b"") == 0
