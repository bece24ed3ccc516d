"""data.train / data.eval also take a Parquet file and a folder written by `datasets`
save_to_disk: the same examples as the shipped JSONL tokenize to the same ids, and a
folder that is not one split is a keyed error."""

import datasets
import pytest

from sweeper.spec._load import validate_spec
from tests.conftest import REPO, SFT_EVAL, small_sweep
from trainables.data import read_jsonl, tokenize_split
from trainables.errors import InputError
from trainables.models import load_tokenizer, resolve_model_source


@pytest.fixture(scope="module")
def eval_dataset():
    return datasets.Dataset.from_list([record for _, record in read_jsonl(SFT_EVAL, "data.eval")])


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(resolve_model_source("builtin:tiny-llama", tmp_path_factory.mktemp("tiny")))


def tokenized(tmp_path, eval_source, tokenizer):
    raw = small_sweep("formats", output_dir=str(tmp_path / "out"))
    raw["data"]["eval"] = str(eval_source)
    spec = validate_spec(raw, base_dir=REPO)
    return tokenize_split(spec.trial_config(), "eval", tokenizer)


def test_parquet_and_saved_dataset_tokenize_as_the_jsonl(tmp_path, eval_dataset, tokenizer):
    eval_dataset.to_parquet(str(tmp_path / "eval.parquet"))
    eval_dataset.save_to_disk(str(tmp_path / "eval_saved"))
    expected = tokenized(tmp_path, SFT_EVAL, tokenizer)
    for source in (tmp_path / "eval.parquet", tmp_path / "eval_saved"):
        assert tokenized(tmp_path, source, tokenizer).input_ids == expected.input_ids


def test_a_folder_of_several_splits_names_them(tmp_path, eval_dataset, tokenizer):
    datasets.DatasetDict({"train": eval_dataset, "test": eval_dataset}).save_to_disk(str(tmp_path / "both"))
    with pytest.raises(InputError, match=r"^data.eval: .*both holds several splits; give one split's folder: .*both/train"):
        tokenized(tmp_path, tmp_path / "both", tokenizer)


def test_a_plain_folder_is_a_keyed_error(tmp_path):
    raw = small_sweep("formats", output_dir=str(tmp_path / "out"))
    raw["data"]["eval"] = str(tmp_path)
    with pytest.raises(Exception, match=r"data.eval: .*is a folder but not a dataset written by datasets' save_to_disk"):
        validate_spec(raw, base_dir=REPO)
