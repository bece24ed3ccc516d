#!/usr/bin/env bash
# The quickstart: set up, then run the CPU sweep with the embedded defaults
# (local Ray cluster with dashboard, SQLite MLflow store and sweeps/ in this folder).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
exec sweep start search_spaces/quickstart.yaml --overwrite "$@"
