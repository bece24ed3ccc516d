#!/usr/bin/env bash
# Debian's chromium for the tests that open pages (the report's index.html, the Ray,
# Optuna and MLflow dashboards) and for kaleido's static plots: installed with apt-get
# when it is missing and this runs as root; otherwise one line says those tests will be
# skipped (each skip names the reason in pytest's summary).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "setup: installing Debian's chromium for the browser tests"
  log=$(mktemp)
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >"$log" 2>&1; then
    cat "$log"
    echo "setup: chromium could not be installed; the browser tests will be skipped"
  fi
  rm -f "$log"
else
  echo "setup: chromium is missing (apt-get install chromium needs root); the browser tests will be skipped"
fi
