"""trainables.common.Throughput: tokens over training seconds between reports, and how
much of those seconds the training thread was on a CPU (a starved thread shows it)."""

import time

from trainables.common import Throughput


def test_a_thread_that_waits_has_a_low_cpu_share_and_one_that_computes_counts_its_cpu_time():
    throughput = Throughput()
    throughput.start()
    time.sleep(0.3)
    throughput.stop(tokens=100)
    tokens, seconds, cpu_seconds = throughput.take()
    assert tokens == 100 and seconds >= 0.3
    waiting_share = cpu_seconds / seconds
    assert waiting_share < 0.1

    # Compute until the thread has had 0.2 s of a core, however long the machine takes to
    # give it (a fixed wall window read 24% of a core on a loaded 2-core machine).
    throughput.start()
    cpu_started, deadline = time.thread_time(), time.perf_counter() + 60
    while time.thread_time() - cpu_started < 0.2 and time.perf_counter() < deadline:
        pass
    throughput.stop(tokens=50)
    throughput.start()
    throughput.stop(tokens=50)
    tokens, seconds, cpu_seconds = throughput.take()
    assert tokens == 100
    # The thread's own CPU time, which one thread cannot spend faster than the clock runs.
    assert 0.2 <= cpu_seconds <= seconds + 0.01
    assert throughput.take() == (0, 0.0, 0.0)  # taken means reset
