"""trainables.common.Throughput: tokens over training seconds between reports, and how
much of those seconds the training thread was on a CPU (a starved thread shows it)."""

import time

from trainables.common import Throughput


def test_a_thread_that_waits_has_a_low_cpu_share_and_one_that_computes_a_high_one():
    throughput = Throughput()
    throughput.start()
    time.sleep(0.3)
    throughput.stop(tokens=100)
    tokens, seconds, cpu_seconds = throughput.take()
    assert tokens == 100 and seconds >= 0.3
    waiting_share = cpu_seconds / seconds
    assert waiting_share < 0.1

    throughput.start()
    deadline = time.perf_counter() + 0.3
    while time.perf_counter() < deadline:
        pass
    throughput.stop(tokens=50)
    throughput.start()
    throughput.stop(tokens=50)
    tokens, seconds, cpu_seconds = throughput.take()
    assert tokens == 100
    # Far above the waiting thread's, even where other load and the hypervisor take
    # a good part of this core.
    assert cpu_seconds / seconds > max(0.3, 5 * waiting_share)
    assert throughput.take() == (0, 0.0, 0.0)  # taken means reset
