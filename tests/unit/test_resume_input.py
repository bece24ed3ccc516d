"""Resume refuses a sweep folder it cannot write, before Ray or MLflow start."""

import os
from pathlib import Path

import pytest

from sweeper.errors import UserError
from sweeper.run._launch import resume_sweep
from sweeper.spec._load import spec_to_yaml, validate_spec
from tests.conftest import REPO, small_sweep


def test_resume_refuses_a_read_only_sweep_folder(tmp_path, monkeypatch):
    sweep_dir = tmp_path / "sweeps" / "ro"
    (sweep_dir / "tune").mkdir(parents=True)
    (sweep_dir / "tune" / "tuner.pkl").write_bytes(b"")
    spec = validate_spec(small_sweep("ro", output_dir=str(sweep_dir)), base_dir=REPO)
    (sweep_dir / "sweep.yaml").write_text(spec_to_yaml(spec))
    sweep_dir.chmod(0o555)
    real_access = os.access
    # Root may write anywhere: answer as the file system answers an ordinary user.
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != sweep_dir and real_access(path, mode))
    try:
        with pytest.raises(UserError, match=rf"^NAME: cannot resume: {sweep_dir} is read-only; "):
            resume_sweep(sweep_dir)
    finally:
        sweep_dir.chmod(0o755)
