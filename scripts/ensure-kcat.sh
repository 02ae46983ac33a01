#!/usr/bin/env bash
# Protocol tests drive the broker with kcat (librdkafka's CLI); install it from Debian when missing.
set -euo pipefail
if command -v kcat >/dev/null 2>&1 || command -v kafkacat >/dev/null 2>&1; then
  exit 0
fi
echo "kcat not found: installing it with apt" >&2
SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq kcat >/dev/null
