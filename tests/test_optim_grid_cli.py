"""experiments/optim_grid.py's case list parsing (the device command uses ranges)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

from optim_grid import CASES, parse_cases  # noqa: E402


def test_parse_cases_ranges_and_singles():
    assert parse_cases("0-3,5,7-8") == [0, 1, 2, 3, 5, 7, 8]
    assert parse_cases("4") == [4]
    # the device command: every case but the 64-GPU 10 MB All-Gather (index 18)
    idx = parse_cases("0-17,19-25")
    assert len(idx) == len(CASES) - 1 == 25 and 18 not in idx
    assert CASES[18][0] == "allgather 10MB 64g t63"
    with pytest.raises(ValueError):
        parse_cases("a-b")
