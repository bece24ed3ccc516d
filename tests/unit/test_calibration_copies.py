"""`sweep plan` calibrates with copies side by side, spawned processes: killed by a signal
that runs no `finally` (SIGKILL here; SIGTERM from `timeout` did it), it left them training
on. Each copy now ends when its parent is gone. Real processes, no Ray."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import small_sweep, wait_for, write_yaml

from sweeper.plan.calibrate import BARRIER_SECONDS

HANG_S = 300  # a bound on a hang, not on speed
# Without its watch a copy whose parent is gone still waits at the copies' barrier for
# BARRIER_SECONDS before it ends: the copy's end is awaited for well under that, or the
# test would pass without the watch.
ENDS_WITHIN_S = BARRIER_SECONDS / 5


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core calibrates with one copy, spawning none")
def test_a_killed_plan_leaves_no_calibration_copy_training(tmp_path):
    raw = small_sweep("x", cost={"calibrate": True})
    file = write_yaml(tmp_path / "x.yaml", raw)
    plan = subprocess.Popen([sys.executable, "-m", "sweeper.cli", "plan", str(file)], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        copy = wait_for(lambda: next((child for child in psutil.Process(plan.pid).children()
                                      if "spawn_main" in " ".join(child.cmdline())), None),
                        HANG_S, "sweep plan's calibration copy", every=0.5)
        time.sleep(5)  # into its imports or its training
    finally:
        plan.kill()
        plan.wait()

    def ended() -> bool:
        try:
            return copy.status() == psutil.STATUS_ZOMBIE  # ended, not reaped by an init that reaps nothing
        except psutil.NoSuchProcess:
            return True

    try:
        wait_for(ended, ENDS_WITHIN_S, f"the calibration copy {copy.pid} to end after its parent was killed", every=0.5)
    finally:
        if not ended():
            copy.send_signal(signal.SIGKILL)
