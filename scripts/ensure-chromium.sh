#!/usr/bin/env bash
# The console's browser tests (tests/broker/console) drive Debian's headless Chromium with
# Playwright (executable_path=/usr/bin/chromium: no `playwright install` download).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
echo "chromium not found: installing it with apt" >&2
SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
