#!/usr/bin/env bash
# The whole test suite: unit tests (seconds) and integration tests (real Ray cluster,
# real MLflow store, real training of the built-in tiny model). Without arguments the
# unit tests run on two processes (pytest-xdist: 73 s instead of 102 s on the 2-core
# machine), then the integration tests one at a time (each sweep starts a Ray cluster
# sized to the whole machine); both run even when the first fails. Arguments go to one
# plain pytest run instead, e.g. `scripts/test.sh -m "not integration"` for the fast
# part only, or `scripts/test.sh tests/integration/test_sweep.py`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
if [ "$#" -gt 0 ]; then
  exec python -m pytest "$@"
fi
status=0
python -m pytest tests/unit -n 2 || status=$?
python -m pytest tests/integration || status=$((status > 0 ? status : $?))
exit "$status"
