"""`sweep doctor`: what this machine's training stack is and whether each part works."""

from __future__ import annotations

from rich.table import Table

from sweeper.cli._common import console


def doctor() -> None:
    """Print torch and its CUDA build, the NVIDIA driver, the GPUs, bitsandbytes, DeepSpeed
    and flash-attn: the version of each and whether it works here (imported, and given a
    tiny real operation where that is cheap: a matmul, an NF4 round trip, an attention).
    Runs nothing else; exit status 0 whatever it finds."""
    from sweeper.doctor import checks, nvidia_gpus

    table = Table("part", "what", "works", "detail", box=None, pad_edge=False)
    for check in checks(nvidia_gpus()):
        works = {True: "[green]yes[/green]", False: "[red]no[/red]", None: "-"}[check.works]
        table.add_row(check.part, check.what, works, check.detail)
    console.print(table, soft_wrap=True)
