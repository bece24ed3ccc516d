"""What this machine's training stack is and whether each part works: torch and its CUDA
build, the NVIDIA driver and GPUs, bitsandbytes, DeepSpeed and flash-attn (`sweep
doctor`), and the line `scripts/setup.sh` prints about the torch it installed.

Standard library at import, each library imported by its own check: setup runs these
checks before sweeper's own dependencies are installed, and a broken library must not
stop the others being checked."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

__all__ = ["Check", "Gpu", "checks", "driver_advice", "nvidia_gpus", "setup_lines"]

# The oldest NVIDIA driver series each CUDA major version runs on (NVIDIA's CUDA
# compatibility table: minor-version compatibility within a major version).
MIN_DRIVER_FOR_CUDA = {13: 580, 12: 525, 11: 450}
# PyTorch's own wheel index for CUDA 12.x builds: what a driver of the R525-R575 series runs.
CUDA12_INDEX = "https://download.pytorch.org/whl/cu126"


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    memory_mib: int


@dataclass(frozen=True)
class Check:
    """One part of the stack: `what` it is (version, build), whether it `works` (True,
    False, or None where it does not apply here, as flash-attn without a GPU) and why not."""

    part: str
    what: str
    works: bool | None
    detail: str = ""


def nvidia_gpus(run=subprocess.run) -> list[Gpu] | None:
    """The GPUs `nvidia-smi` lists, with the driver's version; None without nvidia-smi
    (no NVIDIA driver), [] where it lists none or fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if result.returncode != 0:
        return []
    gpus = []
    for line in result.stdout.strip().splitlines():
        name, driver, memory = (field.strip() for field in line.split(","))
        gpus.append(Gpu(name, driver, int(float(memory))))
    return gpus


def driver_advice(driver: str, wheel_cuda: str) -> str | None:
    """One line where the NVIDIA `driver` (e.g. "550.54.15") is older than the torch
    wheel's CUDA (`wheel_cuda`, e.g. "13.0") needs, naming the torch index to use instead;
    None where the driver is new enough."""
    series, cuda_major = int(driver.split(".")[0]), int(wheel_cuda.split(".")[0])
    needed = MIN_DRIVER_FOR_CUDA.get(cuda_major)
    if needed is None or series >= needed:
        return None
    if series >= MIN_DRIVER_FOR_CUDA[12] and cuda_major > 12:
        instead = (
            f"install torch from PyTorch's own wheel index for CUDA 12.x instead: "
            f"TORCH_INDEX_URL={CUDA12_INDEX} scripts/setup.sh (or update the driver to R{needed}+)"
        )
    else:
        instead = f"update the NVIDIA driver to R{needed}+ (R{MIN_DRIVER_FOR_CUDA[12]}+ runs PyTorch's CUDA 12.x wheels, {CUDA12_INDEX})"
    return f"NVIDIA driver {driver} is too old for this torch wheel's CUDA {wheel_cuda} (needs R{needed}+): {instead}"


def setup_lines(gpus: list[Gpu] | None) -> list[str]:
    """What `scripts/setup.sh` says about the torch it left in the environment, given the
    machine's GPUs (`nvidia_gpus()`): the build, and whether CUDA works where there are GPUs;
    a CPU build on a machine with GPUs, or a driver too old for the wheel, each get a line
    naming the fix."""
    import torch

    if not gpus:
        build = "a CUDA build" if torch.version.cuda else "the CPU build"
        return [f"torch {torch.__version__}: {build}, no GPU here: training runs on the CPU"]
    if torch.version.cuda is None:
        return [
            f"torch {torch.__version__} is a CPU build, found first on a machine with {len(gpus)} GPU(s): "
            f"install the CUDA build (pip install --force-reinstall torch=={torch.__version__.split('+')[0]}, "
            f"or TORCH_INDEX_URL={CUDA12_INDEX} scripts/setup.sh for CUDA 12.x)"
        ]
    if torch.cuda.is_available():
        return [f"torch {torch.__version__}: CUDA {torch.version.cuda} build, works on {torch.cuda.device_count()} GPU(s): {gpus[0].name}"]
    advice = driver_advice(gpus[0].driver, torch.version.cuda)
    return [advice or (
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) cannot use the GPUs (torch.cuda.is_available() is false) "
        f"with NVIDIA driver {gpus[0].driver}: check CUDA_VISIBLE_DEVICES and `nvidia-smi`"
    )]


def checks(gpus: list[Gpu] | None) -> list[Check]:
    """Each part of the stack, imported and where cheap given a tiny real operation."""
    torch_check, cuda = _torch()
    return [torch_check, _cuda(gpus, cuda), _driver(gpus), _gpus(gpus, cuda), _bitsandbytes(cuda), _deepspeed(),
            _flash_attn(cuda)]


def _torch() -> tuple[Check, bool]:
    try:
        import torch

        product = torch.ones(8, 8) @ torch.ones(8, 8)
        works = bool(product[0, 0] == 8)
    except Exception as error:  # a broken install: say what it raised
        return Check("torch", "not importable", False, _error(error)), False
    return Check("torch", torch.__version__, works, "" if works else "an 8x8 matmul on the CPU gave a wrong result"), (
        torch.version.cuda is not None and torch.cuda.is_available()
    )


def _cuda(gpus: list[Gpu] | None, cuda: bool) -> Check:
    try:
        import torch
    except Exception:
        return Check("CUDA", "-", False, "torch is not importable")
    if torch.version.cuda is None:
        return Check("CUDA", "CPU build of torch", False if gpus else None,
                     setup_lines(gpus)[0] if gpus else "no GPU here: the CPU build is the one to have")
    if not cuda:
        return Check("CUDA", f"CUDA {torch.version.cuda} build", False if gpus else None,
                     setup_lines(gpus)[0] if gpus else "no GPU here")
    try:
        product = torch.ones(64, 64, device="cuda") @ torch.ones(64, 64, device="cuda")
        torch.cuda.synchronize()
        works = bool(product[0, 0].item() == 64)
    except Exception as error:
        return Check("CUDA", f"CUDA {torch.version.cuda} build", False, _error(error))
    return Check("CUDA", f"CUDA {torch.version.cuda} build", works, "" if works else "a matmul on the GPU gave a wrong result")


def _driver(gpus: list[Gpu] | None) -> Check:
    if gpus is None:
        return Check("NVIDIA driver", "none (no nvidia-smi)", None)
    if not gpus:
        return Check("NVIDIA driver", "nvidia-smi lists no GPU", False, "nvidia-smi failed or found no GPU")
    return Check("NVIDIA driver", gpus[0].driver, True)


def _gpus(gpus: list[Gpu] | None, cuda: bool) -> Check:
    if not gpus:
        return Check("GPUs", "none", None)
    names = ", ".join(f"{gpu.name} ({gpu.memory_mib / 1024:.0f} GiB)" for gpu in gpus)
    return Check("GPUs", f"{len(gpus)}: {names}", cuda, "" if cuda else "torch cannot use them (see CUDA)")


def _bitsandbytes(cuda: bool) -> Check:
    try:
        import bitsandbytes
        import torch

        device = "cuda" if cuda else "cpu"
        weights = torch.randn(64, 64, device=device)
        packed, state = bitsandbytes.functional.quantize_4bit(weights, quant_type="nf4")
        error = (bitsandbytes.functional.dequantize_4bit(packed, state) - weights).abs().max().item()
    except ImportError:
        return Check("bitsandbytes", "not installed", None, "QLoRA (model.quantization) needs it")
    except Exception as error:
        return Check("bitsandbytes", _version("bitsandbytes"), False, _error(error))
    works = error < 1.0
    return Check("bitsandbytes", bitsandbytes.__version__, works,
                 f"NF4 round trip on the {'GPU' if cuda else 'CPU'}" + ("" if works else f": error {error:.3g}"))


def _deepspeed() -> Check:
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator

        accelerator = get_accelerator().device_name()
    except ImportError:
        return Check("DeepSpeed", "not installed", None, "resources.strategy: deepspeed needs it")
    except Exception as error:
        return Check("DeepSpeed", _version("deepspeed"), False, _error(error))
    return Check("DeepSpeed", deepspeed.__version__, True, f"accelerator: {accelerator}")


def _flash_attn(cuda: bool) -> Check:
    try:
        import flash_attn
    except ImportError:
        return Check("flash-attn", "not installed", None, "model.attention: flash_attention_2 needs it")
    except Exception as error:
        return Check("flash-attn", _version("flash-attn"), False, _error(error))
    if not cuda:
        return Check("flash-attn", flash_attn.__version__, None, "runs on CUDA GPUs only")
    try:
        import torch

        q = torch.randn(1, 16, 2, 64, device="cuda", dtype=torch.bfloat16)
        out = flash_attn.flash_attn_func(q, q, q, causal=True)
        torch.cuda.synchronize()
    except Exception as error:
        return Check("flash-attn", flash_attn.__version__, False, _error(error))
    return Check("flash-attn", flash_attn.__version__, bool(out.isfinite().all().item()), "attention on the GPU")


def _version(distribution: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "installed"


def _error(error: Exception) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0][:200]


if __name__ == "__main__":  # scripts/setup.sh, before sweeper's dependencies are installed
    for line in setup_lines(nvidia_gpus()):
        print(f"setup: {line}")
