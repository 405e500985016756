"""experiments/optim_grid.py's case list parsing (the device command uses ranges)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

from optim_grid import CASES, parse_cases  # noqa: E402


def test_parse_cases_ranges_and_singles():
    assert parse_cases("0-3,5,7-8") == [0, 1, 2, 3, 5, 7, 8]
    assert parse_cases("4") == [4]
    # the session-8 device command: every case but the 64-GPU 10 MB All-Gather (index 18)
    idx = parse_cases("0-17,19-25")
    assert len(idx) == 25 and 18 not in idx
    assert CASES[18][0] == "allgather 10MB 64g t63"
    # session 9 appends the threadblock-count cases (26-29) without renumbering the others
    assert CASES[25][0] == "quad allreduce 1MB 8g t7" and len(CASES) == 33
    assert [c[0] for c in CASES[26:30]] == ["allgather 1MB 8g tbest", "allreduce 1MB 8g tbest",
                                            "alltoall 1MB 8g tbest", "allgather 10MB 8g tbest"]
    assert all(c[5] == "best" for c in CASES[26:30])
    # and the GEMM cases (30-32, a 7th field: MB per GPU)
    assert [(c[0], c[5], c[6]) for c in CASES[30:]] == [("allgather 1MB 8g t7 + GEMM 8MB", 7, 8),
                                                        ("allgather 1MB 8g t7 + GEMM 32MB", 7, 32),
                                                        ("allgather 1MB 8g tbest + GEMM 8MB", "best", 8)]
    with pytest.raises(ValueError):
        parse_cases("a-b")
