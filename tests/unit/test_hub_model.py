"""`model.name_or_path: org/name` resolves through the Hugging Face Hub cache exactly as
transformers does: a local Hub cache made from the tiny model, read with HF_HUB_OFFLINE=1
(no network); offline without the model in the cache is a keyed error naming the id.
Each case runs in a fresh process: huggingface_hub reads its settings at import."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from trainables.models import resolve_model_source

HUB_ID = "sweeper-test/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
LOAD = """
import json, sys
from trainables.errors import InputError
from trainables.models import check_model_config, check_target_modules, load_base_model, load_tokenizer, resolve_model_source
source = resolve_model_source(sys.argv[1])
try:
    check_model_config(source)
    check_target_modules(source, ["q_proj"])
    tokenizer = load_tokenizer(source)
    model = load_base_model(source)
except InputError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"layers": model.config.num_hidden_layers, "vocab": len(tokenizer)}))
"""


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """A Hub cache (models--org--name/snapshots/<commit>, refs/main) holding the tiny model."""
    root = tmp_path_factory.mktemp("hub")
    tiny = resolve_model_source("builtin:tiny-llama", root / "built")
    repo = root / "cache" / f"models--{HUB_ID.replace('/', '--')}"
    shutil.copytree(tiny, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return root / "cache"


def load(hub_id: str, cache, **settings) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "home"), **settings}
    result = subprocess.run([sys.executable, "-c", LOAD, hub_id], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return {**json.loads(result.stdout.strip().splitlines()[-1]), "stderr": result.stderr}


def test_a_hub_id_loads_from_the_hub_cache_offline(hub_cache):
    loaded = load(HUB_ID, hub_cache)
    assert loaded["layers"] == 2 and loaded["vocab"] > 0


def test_offline_without_the_model_in_the_cache_is_a_keyed_error_naming_the_id(hub_cache):
    error = load("sweeper-test/not-cached", hub_cache)["error"]
    assert error.startswith(
        "model.name_or_path: sweeper-test/not-cached is not in the Hugging Face cache and the Hub cannot be reached "
        "(HF_HUB_OFFLINE is set); download it once with network access"
    )
    assert "Traceback" not in error


def test_a_cached_hub_id_loads_without_asking_a_hub_that_does_not_answer(hub_cache):
    # Asked online, every file of a cached model went through huggingface_hub's five
    # retries: 35 "Retrying in" lines and 170 s for this load, in every trial.
    loaded = load(HUB_ID, hub_cache, HF_HUB_OFFLINE="0", HF_ENDPOINT="http://127.0.0.1:1")
    assert loaded["layers"] == 2 and loaded["vocab"] > 0
    assert "Retrying in" not in loaded["stderr"] and "127.0.0.1:1" not in loaded["stderr"], loaded["stderr"][-2000:]


def test_online_with_the_hub_unreachable_is_one_request_not_five_retries(hub_cache):
    # huggingface_hub retried the config's HEAD five times (about 25 s), logging each retry,
    # before the same keyed line.
    loaded = load("sweeper-test/not-cached", hub_cache, HF_HUB_OFFLINE="0", HF_ENDPOINT="http://127.0.0.1:1")
    assert loaded["error"].startswith(
        "model.name_or_path: sweeper-test/not-cached is not in the Hugging Face cache and the Hub cannot be reached ("
    ), loaded["error"]
    assert "Retrying in" not in loaded["stderr"], loaded["stderr"][-2000:]
