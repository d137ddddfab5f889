"""Shared fixtures: instruction-set paths and thread counts restored after each test."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the tests' helper modules (_reference)

import lowp  # noqa: E402
from lowp import _lowp  # noqa: E402


@pytest.fixture(params=["default", "scalar"])
def isa(request):
    """Run the test on the best path the CPU has and on the forced scalar reference path."""
    if request.param == "scalar":
        _lowp.set_isa("scalar")
    else:
        _lowp.set_isa(None)
    try:
        yield _lowp.get_isa()
    finally:
        _lowp.set_isa(None)


@pytest.fixture(params=[1, 2])
def threads(request):
    """Run the test at 1 and at 2 threads."""
    before = lowp.get_num_threads()
    lowp.set_num_threads(request.param)
    try:
        yield request.param
    finally:
        lowp.set_num_threads(before)


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)
