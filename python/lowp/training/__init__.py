"""Training tools: low-precision optimizers, loss scaling, fp8 scaling, configs, an MLP.

- :class:`LossScaler`: dynamic loss scaling (PyTorch GradScaler defaults).
- :class:`SGD`, :class:`Adam`: float32 master weights and low-precision working copies
  (or no master: updates applied directly to low-precision weights).
- :class:`Fp8Scaling`: per-tensor delayed scaling for fp8 casts.
- :class:`QuantConfig` and :func:`preset` (:data:`PRESETS`): formats and roundings of a
  training step.
- :class:`MLP`: a NumPy multilayer perceptron whose GEMMs follow a QuantConfig.

``lowp experiment`` (:mod:`lowp.training.experiment`) trains the MLP on the digits data
set under several configs and reports accuracy, loss and time.
"""

from __future__ import annotations

from .config import PRESETS, QuantConfig, preset
from .fp8 import Fp8Scaling
from .mlp import MLP
from .optim import SGD, Adam, Optimizer
from .scaler import LossScaler

__all__ = ["LossScaler", "SGD", "Adam", "Optimizer", "Fp8Scaling", "QuantConfig", "preset", "PRESETS", "MLP"]
