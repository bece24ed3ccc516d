#!/usr/bin/env bash
# The whole test suite: unit tests (seconds) and integration tests (real Ray cluster,
# real MLflow store, real training of the built-in tiny model). Extra arguments go to
# pytest, e.g. `scripts/test.sh -m "not integration"` for the fast part only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
exec python -m pytest "$@"
