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
