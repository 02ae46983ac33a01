#!/usr/bin/env bash
# Spark needs a JVM (17 or newer). Install OpenJDK 17 from Debian when none is on PATH.
set -euo pipefail
if command -v java >/dev/null 2>&1; then
  exit 0
fi
echo "java not found: installing openjdk-17-jre-headless" >&2
SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
