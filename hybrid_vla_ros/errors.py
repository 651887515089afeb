"""Errors raised for bad input. Each message names the value, what was expected and where it came from."""


class HybridVLAError(ValueError):
    """Base class: every rejection of user input or data raises a subclass of this."""


class ConfigError(HybridVLAError):
    """A preset, partition point, parameter or checkpoint is invalid."""


class InputError(HybridVLAError):
    """A frame (image, ego state) or a boundary state does not match what the model expects."""


def expect(condition: bool, error: type[HybridVLAError], message: str) -> None:
    """Raise `error(message)` unless `condition` holds."""
    if not condition:
        raise error(message)


class BoundaryDtypeError(InputError):
    """A boundary state in another dtype than the suffix's `boundary_dtype` names: refused, counted under
    `reason` in diagnostics."""
    reason = "boundary_dtype_mismatch"


class NonFiniteError(InputError):
    """A boundary state or an output holds NaN or Inf: refused, never published. `reason` is the counter it
    goes under in diagnostics (nonfinite_boundary, nonfinite_output)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def expect_finite(values, reason: str, where: str) -> None:
    """Raise NonFiniteError unless every element of `values` (a torch tensor or numpy array) is finite."""
    import numpy as np
    finite = values.isfinite() if hasattr(values, "isfinite") else np.isfinite(values)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        raise NonFiniteError(f"{where}: {bad} of {finite.numel() if hasattr(finite, 'numel') else finite.size} "
                             f"values are NaN or Inf; refused, nothing is published", reason)
