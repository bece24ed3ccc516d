"""The documentation: the site builds with `mkdocs build --strict` (a warning, a broken
link or anchor fails it), its generated pages hold what the code says, and the README
stays a landing page whose links lead somewhere."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

pytest.importorskip("mkdocs", reason="the docs need the dev extras: pip install -e .[dev]")
pytest.importorskip("material", reason="the docs need the dev extras: pip install -e .[dev]")


def _hooks():
    spec = importlib.util.spec_from_file_location("sweeper_docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _build(config, site):
    """`mkdocs build --strict` in a child process that imports this checkout's code."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "-f", str(config), "-d", str(site)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    result = _build(REPO / "mkdocs.yml", folder)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert not re.search(r"^(WARNING|ERROR)", output, re.M), output
    return folder


def _text(site, page: str) -> str:
    return (site / page / "index.html").read_text()


def test_site_builds_strictly_with_every_page(site):
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def pages(entries):
        for entry in entries:
            value = entry if isinstance(entry, str) else next(iter(entry.values()))
            yield from pages(value) if isinstance(value, list) else [value]

    for page in pages(nav):
        built = site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
        assert built.is_file(), page


def test_generated_pages_hold_what_the_code_says(site):
    from sweeper.cli._app import app
    from sweeper.spec._reference import _rows

    yaml_page = _text(site, "reference/yaml")
    for key, *_ in _rows(__import__("sweeper.spec._schema", fromlist=["SweepSpec"]).SweepSpec):
        assert f"<code>{key}</code>" in yaml_page, key
    cli_page = _text(site, "reference/cli")
    for command in app.registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        assert f"<code>sweep {name}</code>" in cli_page, name
    layout = _text(site, "concepts/layout")
    for package in (REPO / "sweeper").glob("*/__init__.py"):
        assert f"sweeper/{package.parent.name}/" in layout
    first_heading = (REPO / "benchmarks" / "README.md").read_text().splitlines()[0].lstrip("# ")
    assert first_heading.split(":")[0] in _text(site, "benchmarks")
    for image in re.findall(r'<img[^>]* src="([^"]+)"', _text(site, "benchmarks")):  # benchmarks/figures/
        assert (site / "benchmarks" / image).resolve().is_file(), image
    assert "search.parameters.&lt;name&gt;.low" in _text(site, "reference/errors")
    python_api = re.sub(r"<[^>]+>", "", _text(site, "guides/python-api"))  # code is highlighted span by span
    assert "def quickstart_spec(" in python_api  # examples/quickstart.py, included


def test_every_keyed_error_of_the_code_is_in_the_catalogue():
    hooks = _hooks()
    catalogue = hooks.error_catalogue()
    covered = {(message.module, message.line) for message in catalogue}
    assert hooks.error_call_sites() - covered == set(), "a UserError/InputError whose messages the catalogue cannot read"
    assert all(message.key != "(whole message)" for message in catalogue), [
        m for m in catalogue if m.key == "(whole message)"
    ]


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[elsewhere](missing.md), [a section](#no-such-section)\n")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), nav=["index.md"], hooks=[str(REPO / "docs" / "hooks.py")], watch=[])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    result = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "missing.md" in output and "no-such-section" in output


def test_readme_is_a_landing_page_whose_links_lead_somewhere():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for command in ("scripts/quickstart.sh", "scripts/test.sh"):
        assert command in text
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) + re.findall(r'(?:src|href)="([^"#]+)"', text)
    assert targets
    for target in targets:
        if not target.startswith(("http://", "https://")):
            assert (REPO / target).exists(), target
