"""A step's reported peak memory is its own, not the process's high-water mark."""

from __future__ import annotations

import sys

import pytest

from seal_graph.training.compute import peak_rss_mb, reset_peak_rss


@pytest.mark.skipif(sys.platform != "linux", reason="the reset needs /proc/self/clear_refs")
def test_peak_after_a_reset_forgets_memory_freed_before_it() -> None:
    ballast = bytearray(400 * 2**20)  # written (zeroed), so resident
    before = peak_rss_mb()
    del ballast
    reset_peak_rss()
    assert before - peak_rss_mb() > 300
