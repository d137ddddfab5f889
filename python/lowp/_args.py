"""Argument checks shared across the package (messages name the argument)."""

from __future__ import annotations

from typing import Any

import numpy as np


def boolean(value: Any, name: str) -> bool:
    """``value`` as a bool: Python's or numpy's bools only (not any truthy value such as
    ``"no"`` or ``1``)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return bool(value)
