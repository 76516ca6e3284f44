"""The formulas the lessons measure against, checked without processes: ring bytes per
collective and the pipeline bubble."""
import pytest

from helpers.views import comm, schedule


def test_wire_bytes_ring_formulas():
    assert comm.wire_bytes("all_reduce", 1000, 4) == 1500  # 2(n-1)/n
    assert comm.wire_bytes("reduce_scatter_tensor", 1000, 4) == 750
    assert comm.wire_bytes("all_gather_into_tensor", 1000, 2) == 500
    assert comm.wire_bytes("isend", 64, 2) == 64 and comm.wire_bytes("irecv", 64, 2) == 0


def test_bubble_formula():
    assert schedule.formula(1, 8) == 0
    assert schedule.formula(4, 4) == pytest.approx(3 / 7)
    assert schedule.formula(2, 4, v=2) == pytest.approx(1 / 9)
