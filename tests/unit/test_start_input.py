"""Start-time input that once escaped (issue 35, item 5): each case is one keyed line, exit
status 2 and nothing written (no sweep folder, no MLflow store), within seconds, through
the CLI as a user runs it. No Ray: the launch's Ray entry points fail the test if reached."""

import json
import math
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import sweeper.run._launch as launch
from sweeper.cli import app
from tests.conftest import SFT_TRAIN, small_sweep, write_yaml
from tests.ports import free_port

runner = CliRunner()
# A refusal that waits instead of refusing (a store that retries, a server that does not
# answer) fails here as a hang rather than holding the tier up.
pytestmark = pytest.mark.timeout(120)

# Nine lines of nested aliases: 9^9 (387 million) strings once expanded.
BILLION_LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9) if previous else ', '.join(['lol'] * 9)}]\n"
    for previous, name in zip([None, *"abcdefgh"], "abcdefghi")
)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """The working directory of the command (where the default MLflow store would go),
    with Ray's entry points in the launch made to fail the test."""
    monkeypatch.chdir(tmp_path)

    def no_ray(*args, **kwargs):
        raise AssertionError("bad input reached Ray")

    monkeypatch.setattr(launch, "start_ray", no_ray)
    return tmp_path


def refused(workdir: Path, *args: str) -> str:
    """Run `sweep ARGS` and assert: exit 2, one error line and no traceback, nothing new
    in `workdir`. Returns the error line without its 'error: '. (A refusal that waits
    instead, e.g. on a store that retries, is a hang this module's timeout fails.)"""
    before = sorted(workdir.rglob("*"))
    result = runner.invoke(app, list(args))
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert sorted(workdir.rglob("*")) == before, "bad input left files behind"
    return lines[0].removeprefix("error: ")


def sweep_file(workdir: Path, **sections) -> str:
    raw = small_sweep("x", **{"output_dir": str(workdir / "sweeps" / "x"), **sections})
    return str(write_yaml(workdir / "x.yaml", raw))


def test_output_dir_where_nothing_can_be_written_even_by_root(workdir):
    # os.access says /proc is writable to root; the probe write says otherwise.
    line = refused(workdir, "start", sweep_file(workdir, output_dir="/proc/sweeper-test/x"))
    assert line.startswith("output_dir: cannot create /proc/sweeper-test/x: /proc refuses new files ("), line
    assert line.endswith("; give a folder you can write to")


@pytest.mark.parametrize("uri, message", [
    ("/proc/sweeper-test/store", "storage.uri: cannot create /proc/sweeper-test/store: /proc refuses new files ("),
    ("{workdir}/a-file", "storage.uri: {workdir}/a-file is a file, not a folder; give a folder you can write to, "
                         "or s3://bucket/prefix"),
])
def test_storage_uri_that_is_a_file_or_cannot_be_written(workdir, uri, message):
    (workdir / "a-file").write_text("x")
    line = refused(workdir, "start", sweep_file(workdir, storage={"uri": uri.format(workdir=workdir)}))
    assert line.startswith(message.format(workdir=workdir)), line


@pytest.mark.parametrize("database, message", [
    ("/proc/mlflow.db", "tracking.uri: cannot create the SQLite store /proc/mlflow.db: /proc refuses new files ("),
    ("{workdir}", "tracking.uri: {workdir} is a folder; name the SQLite file in it, sqlite:///{workdir}/mlflow.db"),
])
def test_sqlite_tracking_store_that_cannot_be_written(workdir, database, message):
    database = database.format(workdir=workdir)
    line = refused(workdir, "start", sweep_file(workdir, tracking={"uri": f"sqlite:///{database}"}))
    assert line.startswith(message.format(workdir=workdir)), line


@pytest.mark.parametrize("uri, message", [
    ("ftp://host/x", "tracking.uri: ftp:// is not a tracking store sweeper can use; give sqlite:///path/mlflow.db"),
    # SQLAlchemy's postgresql driver is not among our dependencies: its first query was a traceback.
    ("postgresql://user@127.0.0.1:1/db", "tracking.uri: postgresql:// needs the database driver psycopg"),
    ("mysql://user@127.0.0.1:1/db", "tracking.uri: mysql:// needs the database driver MySQLdb, which is not installed "
     "here; pip install mysqlclient"),
])
@pytest.mark.parametrize("command", ["start", "list", "status"])
def test_a_tracking_store_sweeper_cannot_use_is_one_keyed_line(workdir, uri, message, command):
    args = ["start", sweep_file(workdir, tracking={"uri": uri})] if command == "start" else [command, "--tracking-uri", uri]
    if command == "status":
        args.insert(1, "x")
    assert refused(workdir, *args).startswith(message)


def test_a_sqlite_store_that_is_a_folder_is_refused_naming_the_file_to_give(workdir):
    # SQLite would retry opening it for minutes.
    line = refused(workdir, "list", "--tracking-uri", f"sqlite:///{workdir}")
    assert line == f"tracking.uri: {workdir} is a folder; name the SQLite file in it, sqlite:///{workdir}/mlflow.db"


@pytest.mark.parametrize("command", [["status", "nope"], ["report", "nope"], ["export", "nope"], ["promote", "nope"]])
def test_a_read_where_no_sweep_ran_creates_no_store_and_no_report_folder(workdir, command):
    # MLflow's client creates a SQLite store, schema and all, on its first query.
    line = refused(workdir, *command)
    assert line == f"NAME: no sweep named 'nope' in sqlite:///{workdir / 'mlflow.db'}; known sweeps: none yet"
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0 and not (workdir / "mlflow.db").exists(), result.output


@pytest.mark.parametrize("sections, expected", [
    ({"cost": {"accelerator": "mine", "prices": {"mine": -1.5}}},
     "cost.prices.mine: Input should be greater than or equal to 0 (got -1.5)"),
    ({"cost": {"prices": {"mine": math.nan}}}, "cost.prices.mine: Input should be a finite number (got nan)"),
    ({"cost": {"usd_per_hour": math.inf}}, "cost.usd_per_hour: Input should be a finite number (got inf)"),
    ({"budget": {"max_usd": math.inf}}, "budget.max_usd: Input should be a finite number (got inf)"),
    ({"budget": {"max_hours": math.nan}}, "budget.max_hours: Input should be a finite number (got nan)"),
    ({"budget": {"max_accelerator_hours": 0}}, "budget.max_accelerator_hours: Input should be greater than 0 (got 0)"),
    ({"search": {"parameters": {"training.warmup_ratio": {"distribution": "uniform", "low": 0.0, "high": math.inf}}}},
     "search.parameters.training.warmup_ratio.high: Input should be a finite number (got inf)"),
    ({"search": {"parameters": {"training.learning_rate": {"distribution": "categorical", "values": [1e-3, math.nan]}}}},
     "search.parameters.training.learning_rate.values: must hold finite numbers, not .nan or .inf "
     "(got [0.001, nan])"),
    ({"resources": {"custom": {"trainer": math.inf}}}, "resources.custom.trainer: Input should be a finite number (got inf)"),
    ({"resources": {"gpus_per_worker": math.inf}}, "resources.gpus_per_worker: must be a number >= 0 or auto (got inf)"),
    ({"early_stopping": {"reduction_factor": math.inf}},
     "early_stopping.reduction_factor: Input should be a finite number (got inf)"),
    ({"training": {"max_grad_norm": math.nan}}, "training.max_grad_norm: Input should be a finite number (got nan)"),
    # YAML's true where a number goes: pydantic alone would read it as 1 (a dollar, a trial).
    ({"budget": {"max_usd": True}}, "budget.max_usd: expected a number, got true"),
    ({"search": {"num_trials": True}}, "search.num_trials: expected a number, got true"),
    ({"training": {"learning_rate": False}}, "training.learning_rate: expected a number, got false"),
    # Past what the samplers and the forecast take: numpy refuses seeds past 2**32 - 1 in a
    # trial or in Optuna's sampler, and the forecast counted 10**12 trials for minutes.
    ({"search": {"seed": 2**70}}, "search.seed: Input should be less than or equal to 4294967295 (got 1180591620717411303424)"),
    ({"training": {"seed": 2**32}}, "training.seed: Input should be less than or equal to 4294967295 (got 4294967296)"),
    ({"search": {"num_trials": 10**12}}, "search.num_trials: Input should be less than or equal to 1000000 (got 1000000000000)"),
])
def test_numbers_that_mean_nothing_are_refused(workdir, sections, expected):
    # YAML writes them as -1.5, .nan and .inf.
    assert refused(workdir, "start", sweep_file(workdir, **sections)) == expected


@pytest.mark.parametrize("command", ["start", "validate", "plan", "submit"])
def test_nested_aliases_are_refused_before_anything_is_built(workdir, command):
    (workdir / "laughs.yaml").write_text(BILLION_LAUGHS)
    line = refused(workdir, command, str(workdir / "laughs.yaml"))
    assert line == (
        "f.0: the file expands to more than 100,000 values here through the alias *e; a sweep file holds a few "
        "hundred: write the values out instead of nesting aliases (&name, *name)"
    )


def test_a_resumed_sweep_file_is_read_by_the_same_loader(workdir):
    folder = workdir / "sweeps" / "laughs"
    folder.mkdir(parents=True)
    (folder / "sweep.yaml").write_text(BILLION_LAUGHS)
    assert refused(workdir, "resume", "laughs").startswith("f.0: the file expands to more than 100,000 values")


def test_a_resume_into_a_folder_nothing_can_write_is_refused_before_it_reads_the_storage(workdir):
    line = refused(workdir, "resume", "x", "--storage", str(workdir / "store"), "--sweep-dir", "/proc/sweeper-test/x")
    assert line.startswith("--sweep-dir: cannot create /proc/sweeper-test/x: /proc refuses new files ("), line


def test_aliases_within_the_bound_still_load(workdir):
    text = Path(sweep_file(workdir)).read_text()
    text = text.replace("  eval_every: 10\n", "  eval_every: &ten 10\n").replace("  grace_period: 10\n", "  grace_period: *ten\n")
    assert "*ten" in text
    (workdir / "x.yaml").write_text(text)
    result = runner.invoke(app, ["validate", str(workdir / "x.yaml")])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("text, expected", [
    ("name: " + "[" * 5000 + "]" * 5000 + "\n", "name.0.0.(...): nested more than 64 levels deep"),
    ("name: x\ndata: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", "data.a.a.(...): nested more than 64 levels deep"),
])
def test_nesting_past_the_recursion_limit_is_refused(workdir, text, expected):
    (workdir / "deep.yaml").write_text(text)
    assert refused(workdir, "start", str(workdir / "deep.yaml")).startswith(expected)


def test_a_file_far_larger_than_a_sweep_file_is_refused(workdir):
    (workdir / "big.yaml").write_text("name: x\n" + "# padding\n" * 200_000)
    line = refused(workdir, "start", str(workdir / "big.yaml"))
    assert line == f"{workdir / 'big.yaml'}: 2,000,008 bytes, more than a sweep file's 1,048,576; give the sweep's YAML file"


def test_an_integer_python_will_not_read_is_refused_where_it_is(workdir):
    text = Path(sweep_file(workdir)).read_text().replace("num_trials: 4", "num_trials: 1" + "0" * 5000)
    (workdir / "x.yaml").write_text(text)
    line = refused(workdir, "start", str(workdir / "x.yaml"))
    assert line == "search.num_trials: a whole number of 5,001 digits; Python reads at most 4,300: give a number a sweep can use"


@pytest.mark.parametrize("sections, key", [
    ({"training": {"per_device_batch_size": 100}}, "training.per_device_batch_size"),
    ({"search": {"parameters": {"training.per_device_batch_size": {"distribution": "categorical", "values": [8, 100]}}}},
     "search.parameters.training.per_device_batch_size"),
])
def test_a_micro_batch_larger_than_the_training_set_is_refused(workdir, sections, key):
    # A zero too many: the calibration (or every trial) would run for hours on repeated examples.
    # `plan` reads the data as `start` does (prepare_inputs); its time is torch's and transformers' imports, not hours.
    train = workdir / "train.jsonl"
    train.write_text("".join(SFT_TRAIN.read_text().splitlines(keepends=True)[:20]))
    line = refused(workdir, "plan", sweep_file(workdir, data={"train": str(train)}, **sections))
    assert line.startswith(f"{key}: 100 examples a micro-batch, but data.train holds 20; give at most 20"), line


@pytest.mark.parametrize("address, message", [
    ("bogus", "--address: expected auto, HOST:PORT or ray://HOST:PORT, got 'bogus'"),
    ("127.0.0.1:1", "--address: no Ray cluster answers at 127.0.0.1:1 ("),
])
def test_an_address_is_checked_before_the_data_is_read_or_anything_starts(workdir, monkeypatch, address, message):
    # Checked before the data's tokenizing, so a typo's line comes in seconds.
    # (`sweep resume` takes the same path, after its own checks of the sweep folder.)
    def no_data(*args, **kwargs):
        raise AssertionError("the data was read before the address was checked")

    monkeypatch.setattr(launch, "prepare_inputs", no_data)
    assert refused(workdir, "start", sweep_file(workdir), "--address", address).startswith(message)


def test_plan_refuses_a_warm_start_from_a_sweep_that_is_not_there_as_start_does(workdir):
    # `sweep plan` said "Planned" for a sweep that `sweep start` then refused.
    line = refused(workdir, "plan", sweep_file(workdir, search={"warm_start": [{"sweep": "nope"}]}), "--no-calibrate")
    assert line.startswith(f"search.warm_start.0.sweep: no earlier sweep 'nope' at {workdir / 'sweeps' / 'nope'} (no optuna.db)")


# Refusals that hold before Ray starts, once run on the integration tier's local cluster
# (which bounded no time).


def test_a_sweep_file_naming_missing_data_starts_nothing(workdir):
    bad = workdir / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "bad", "data": {"train": "missing.jsonl", "eval": "missing.jsonl"}}))
    result = runner.invoke(app, ["start", str(bad)])
    # Both files' lines together (one validation pass), nothing written, Ray never reached.
    assert result.exit_code == 2, result.output
    assert "error: data.train: file" in result.output and "Traceback" not in result.output
    assert sorted(workdir.iterdir()) == [bad]


def test_an_existing_sweep_is_not_overwritten(workdir):
    existing = workdir / "sweeps" / "x"
    existing.mkdir(parents=True)
    (existing / "keep.txt").write_text("finished work")
    assert "name: a sweep named 'x' already exists" in refused(workdir, "start", sweep_file(workdir))
    assert (existing / "keep.txt").read_text() == "finished work"


def test_an_unreachable_tracking_server_is_one_keyed_line_before_anything_starts(workdir):
    line = refused(workdir, "start", sweep_file(workdir, tracking={"uri": f"http://127.0.0.1:{free_port()}"}))
    assert line.startswith("tracking.uri: cannot reach MLflow at http://127.0.0.1:"), line


@pytest.mark.parametrize("sections, expected", [
    ({"data": {"train": "empty.jsonl"}}, r"data.train: .*empty.jsonl is empty"),
    ({"data": {"train": "broken.jsonl"}}, r"data.train: .*broken.jsonl line 2: invalid JSON"),
    ({"model": {"name_or_path": "./no-such-model"}}, r"model.name_or_path: .*does not exist"),
])
def test_data_or_a_model_that_cannot_be_read_is_one_keyed_line(workdir, sections, expected):
    (workdir / "empty.jsonl").write_text("")
    (workdir / "broken.jsonl").write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n{oops\n")
    if "data" in sections:
        sections = {"data": {"train": str(workdir / sections["data"]["train"])}}
    line = refused(workdir, "start", sweep_file(workdir, **sections))
    assert re.match(expected, line), line


def test_auto_with_an_address_file_naming_a_dead_head_is_one_keyed_line(workdir, monkeypatch, tmp_path_factory):
    # What `ray start --head` leaves behind when its head is ended without `ray stop`.
    ray_tmp = tmp_path_factory.mktemp("ray-tmp")
    (ray_tmp / "ray").mkdir()
    port = free_port()
    (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")
    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    line = refused(workdir, "start", sweep_file(workdir), "--address", "auto")
    assert line.startswith(f"--address: no Ray cluster answers at 127.0.0.1:{port}"), line
