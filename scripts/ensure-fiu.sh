#!/usr/bin/env bash
# The fault campaign's read-io-error fault injects read failures with libfiu
# (fiu-run / fiu-ctrl, Debian's fiu-utils); install it from Debian when missing.
# Without it the campaign skips that fault kind and says so in its summary.
set -euo pipefail
if command -v fiu-run >/dev/null 2>&1 && command -v fiu-ctrl >/dev/null 2>&1; then
  exit 0
fi
echo "fiu-run not found: installing fiu-utils (libfiu) with apt" >&2
SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
$SUDO apt-get update -qq
# another apt may hold the lock for a while (a shared machine): wait for it
$SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=300 fiu-utils >/dev/null
