"""`data.train` / `data.eval: org/name:split` read a Hugging Face Hub dataset's split
through the Hub cache, as `model.name_or_path: org/name` loads a model: a local Hub cache
(datasets--org--name/snapshots/<commit>, refs/main) built here from the shipped data,
read with HF_HUB_OFFLINE=1 (no network). Offline without the dataset in the cache, or
with a split it does not have, is one keyed error naming the id. Each case runs in a
fresh process: huggingface_hub reads its settings at import."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from sweeper.spec._load import spec_to_yaml, validate_spec
from tests.conftest import REPO, SFT_EVAL, SFT_TRAIN, small_sweep
from trainables.sections import HubSplit

HUB_ID = "sweeper-test/chat"
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
TOKENIZE = """
import json, sys
from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep
from trainables.data import file_sha256, tokenize_split
from trainables.errors import InputError
from trainables.models import load_tokenizer, resolve_model_source

raw = small_sweep("hub-data", output_dir=sys.argv[3])
raw["data"]["train"], raw["data"]["eval"] = sys.argv[1], sys.argv[2]
spec = validate_spec(raw, base_dir=REPO)
tokenizer = load_tokenizer(resolve_model_source("builtin:tiny-llama", sys.argv[4]))
try:
    ids = {split: tokenize_split(spec.trial_config(), split, tokenizer).input_ids for split in ("train", "eval")}
    hashes = [file_sha256(spec.data.train), file_sha256(spec.data.eval)]
except InputError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"ids": ids, "hashes": hashes}))
"""


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """A Hub cache holding a dataset repo with the shipped SFT data as its train and test
    splits, laid out as on the Hub (data/<split>.jsonl)."""
    root = tmp_path_factory.mktemp("hub-data")
    repo = root / "cache" / f"datasets--{HUB_ID.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT / "data"
    snapshot.mkdir(parents=True)
    shutil.copyfile(SFT_TRAIN, snapshot / "train.jsonl")
    shutil.copyfile(SFT_EVAL, snapshot / "test.jsonl")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return root


def tokenize(train: str, eval_: str, root, **settings) -> dict:
    env = {
        **os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(root / "cache"), "HF_HOME": str(root / "home"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **settings,
    }
    result = subprocess.run(
        [sys.executable, "-c", TOKENIZE, train, eval_, str(root / "out"), str(root / "tiny")],
        capture_output=True, text=True, env=env, timeout=300, cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return {**json.loads(result.stdout.strip().splitlines()[-1]), "stderr": result.stderr}


def test_a_hub_split_reads_from_the_hub_cache_offline_as_the_same_local_files(hub_cache):
    from_hub = tokenize(f"{HUB_ID}:train", f"{HUB_ID}:test", hub_cache)
    local = tokenize(str(SFT_TRAIN), str(SFT_EVAL), hub_cache)
    assert from_hub["ids"] == local["ids"] and len(from_hub["ids"]["eval"]) > 0
    assert from_hub["hashes"][0] == from_hub["hashes"][1]  # both splits: the snapshot's files


def test_a_cached_hub_split_reads_without_asking_a_hub_that_does_not_answer(hub_cache):
    # Asked online, the cached dataset went through huggingface_hub's five retries (about
    # 25 s, a "Retrying in" line each) at each of its reads.
    unreachable = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:1"}
    from_hub = tokenize(f"{HUB_ID}:train", f"{HUB_ID}:test", hub_cache, **unreachable)
    assert len(from_hub["ids"]["train"]) > 0, from_hub
    assert "Retrying in" not in from_hub["stderr"], from_hub["stderr"][-2000:]
    # Not cached: one request to the Hub decides, then the keyed line.
    missing = tokenize("sweeper-test/not-cached:train", str(SFT_EVAL), hub_cache, **unreachable)
    assert missing["error"].startswith(
        "data.train: cannot get the Hub dataset sweeper-test/not-cached (from the Hub cache or the Hub): "
        "not in the Hugging Face cache and the Hub cannot be reached ("
    ), missing["error"]
    assert "Retrying in" not in missing["stderr"], missing["stderr"][-2000:]


def test_offline_without_the_dataset_in_the_cache_is_a_keyed_error_naming_the_id(hub_cache):
    error = tokenize("sweeper-test/not-cached:train", str(SFT_EVAL), hub_cache)["error"]
    assert error.startswith("data.train: cannot get the Hub dataset sweeper-test/not-cached (from the Hub cache or the Hub)")
    assert "\n" not in error and "Traceback" not in error


def test_a_split_the_dataset_lacks_is_a_keyed_error_naming_its_splits(hub_cache):
    error = tokenize(str(SFT_TRAIN), f"{HUB_ID}:validation", hub_cache)["error"]
    assert error.startswith(f"data.eval: cannot read split 'validation' of the Hub dataset {HUB_ID}")
    assert "train" in error and "test" in error


def test_the_yaml_form_round_trips_and_a_local_path_is_still_a_path(tmp_path):
    raw = small_sweep("hub-yaml", output_dir=str(tmp_path / "out"))
    raw["data"]["train"] = f"{HUB_ID}:train"
    spec = validate_spec(raw, base_dir=REPO)
    assert spec.data.train == HubSplit(HUB_ID, "train") and spec.data.eval == SFT_EVAL
    assert f"train: {HUB_ID}:train" in spec_to_yaml(spec)
    assert validate_spec(raw, base_dir=REPO).data == spec.data
