"""dclr: train, evaluate and serve sentence encoders with debiased contrastive learning."""

from dclr.errors import DclrError, InputError

__version__ = "0.1.0"

__all__ = ["DclrError", "InputError", "__version__"]
