"""`sweep doctor` and the line setup prints about torch: what they say on this CPU
machine, and what they would say on GPU machines whose torch cannot use the GPUs."""

import shutil
import subprocess

import pytest
import torch
from typer.testing import CliRunner

from sweeper.cli._app import app
from sweeper.doctor import CUDA12_INDEX, Gpu, checks, driver_advice, nvidia_gpus, setup_lines

H100 = [Gpu("NVIDIA H100 80GB HBM3", "550.54.15", 81559)]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="says what a machine without GPUs gets")
def test_doctor_on_a_cpu_machine_names_the_cpu_build_and_what_works():
    result = CliRunner().invoke(app, ["doctor"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {line.split("  ")[0]: line for line in result.output.splitlines()}
    assert torch.__version__ in rows["torch"] and "yes" in rows["torch"]
    assert "CPU build of torch" in rows["CUDA"]
    assert "none (no nvidia-smi)" in rows["NVIDIA driver"]
    assert rows["GPUs"].split()[1] == "none"
    for part in ("bitsandbytes", "DeepSpeed", "flash-attn"):
        assert part in rows, part
    found = {check.part: check for check in checks(None)}
    assert found["torch"].works and found["CUDA"].works is None and found["flash-attn"].works in (None, True)


def test_a_driver_too_old_for_the_wheels_cuda_gets_the_cuda12_index():
    line = driver_advice("550.54.15", "13.0")
    assert "550.54.15" in line and "CUDA 13.0" in line and "R580" in line and CUDA12_INDEX in line
    assert driver_advice("580.65.06", "13.0") is None
    assert driver_advice("570.1", "12.6") is None
    older = driver_advice("470.82.01", "13.0")
    assert "470.82.01" in older and "update the NVIDIA driver" in older


def test_setup_names_a_cpu_wheel_found_first_on_a_gpu_machine(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    (line,) = setup_lines(H100)
    assert "CPU build" in line and "1 GPU(s)" in line and "--force-reinstall" in line
    (line,) = setup_lines(None)
    assert "the CPU build, no GPU here" in line


def test_setup_names_the_driver_when_the_cuda_build_cannot_use_the_gpus(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    (line,) = setup_lines(H100)
    assert line.startswith("NVIDIA driver 550.54.15 is too old for this torch wheel's CUDA 13.0")
    cuda = {check.part: check for check in checks(H100)}["CUDA"]
    assert cuda.works is False and "550.54.15" in cuda.detail


def test_nvidia_smi_rows_become_gpus(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi")

    def run(command, **kwargs):
        out = "NVIDIA H200, 580.82.07, 143771\nNVIDIA H200, 580.82.07, 143771\n"
        return subprocess.CompletedProcess(command, 0, stdout=out, stderr="")

    assert nvidia_gpus(run) == [Gpu("NVIDIA H200", "580.82.07", 143771)] * 2
    assert nvidia_gpus(lambda command, **kwargs: subprocess.CompletedProcess(command, 9, "", "no devices")) == []
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert nvidia_gpus(run) is None
