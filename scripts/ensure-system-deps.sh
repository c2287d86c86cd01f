#!/usr/bin/env bash
# Install the system packages the tests and the voice channel need when they are missing:
# Debian chromium + chromium-driver (browser test), espeak-ng (offline TTS) and prometheus
# (the dashboards' queries are evaluated by a real Prometheus).
# Idempotent and quiet: does nothing when all are present.
set -euo pipefail

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
[ -x /usr/bin/prometheus ] || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-system-deps: ${missing[*]} missing and apt-get is not available; install them" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
    echo "ensure-system-deps: need root (or sudo) to install ${missing[*]}" >&2
    exit 1
  fi
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# apt's chatter goes to a log that is shown only when something fails.
if ! { $SUDO apt-get update -qq && \
       $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
