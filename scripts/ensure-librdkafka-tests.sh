#!/usr/bin/env bash
# librdkafka's integration tests (tests/reliability/test_librdkafka_suite.py) run its
# test-runner, built from Debian's source package into .cache/librdkafka/: minutes on two
# busy cores, so it is built here, before pytest, and never inside a test's timeout. A
# later call finds the build's stamp and returns at once; an interrupted build has none
# and is redone. Usage: scripts/ensure-librdkafka-tests.sh [python]
set -euo pipefail
PYTHON="${1:-python3}"
exec "$PYTHON" "$(dirname "$0")/librdkafka_tests.py" --prepare-only
