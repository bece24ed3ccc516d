"""The read-only commands (`sweep list/status/report/promote/export`) start without Ray or
torch: their modules import neither until a command needs it."""

import json
import os
import subprocess
import sys

HEAVY = ("ray", "torch")


def imported_after(statement: str) -> list[str]:
    code = f"import sys, json; {statement}; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_store_views_promote_and_reports_import_neither_ray_nor_torch():
    assert imported_after("import sweeper.track._store, sweeper.views, sweeper.promote._registry, sweeper.promote._export, reports") == []


def test_sweep_dashboard_validate_and_the_python_api_import_neither_ray_nor_torch():
    """`sweep dashboard`, the warm-start check of `sweep validate`, and `import sweeper`."""
    assert imported_after("import sweeper, sweeper.api, sweeper.search._study, sweeper.search._warm_start") == []


def test_the_cli_and_a_store_client_import_neither_ray_nor_torch():
    statement = "import sweeper.cli; from sweeper.track._mlflow_store import client_for; client_for('sqlite:///:memory:')"
    assert imported_after(statement) == []


def test_fetching_a_sweep_from_storage_does_not_import_ray():
    """`sweep resume --storage` fetches before it joins the cluster, in token mode when a
    token is where Ray looks; Ray reads that mode when it is first imported."""
    statement = (
        "from sweeper.run._from_storage import fetch_sweep; from sweeper.errors import UserError\n"
        "try: fetch_sweep('x', '/nonexistent/x', '/nonexistent/here')\nexcept UserError: pass"
    )
    assert "ray" not in imported_after(statement)


def test_the_tune_callback_does_import_ray():
    """The check above can fail: the driver's Tune callback module does import Ray."""
    assert "ray" in imported_after("import sweeper.run._driver")
