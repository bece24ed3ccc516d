#!/usr/bin/env bash
# The test suite in two tiers, after setting up .venv:
#   scripts/test.sh          the quick tier: the unit tests (no Ray, seconds each) on two
#                            processes, then one integration test per user story (marked
#                            `story`: start, stop and resume after kill -9, bad input, report,
#                            promote, DPO, GRPO, kill -9 under ZeRO-3 and FSDP, cluster
#                            join, a budget-driven sweep)
#   scripts/test.sh --all    every test: the unit tests, then every integration test (real
#                            Ray cluster, real MLflow store, real training of the built-in tiny
#                            model). This is what CI runs (.ci/run).
#   scripts/test.sh ARGS     one plain pytest run with ARGS, e.g. `tests/integration/test_sweep.py`
# Integration tests run one at a time: each sweep starts a Ray cluster sized to the machine.
# Both parts of a tier run even when the first fails. Each part writes its per-test times as
# a JUnit report to test-reports/ (git-ignored): unit.xml, integration.xml.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
integration=(-m story)
if [ "${1:-}" = "--all" ]; then
  integration=()
  shift
fi
if [ "$#" -gt 0 ]; then
  exec python -m pytest "$@"
fi
status=0
python -m pytest tests/unit -n 2 --junitxml=test-reports/unit.xml || status=$?
python -m pytest tests/integration "${integration[@]}" --junitxml=test-reports/integration.xml \
  || status=$((status > 0 ? status : $?))
exit "$status"
