"""Training methods as plugins: each registers its config section, builders and objective.

`register(method)` adds one; `get_method(name)` finds it (a recipe's `method:`); the built-in
methods (simcse, consert, dclr, nli, dualcse, simcse_sup) register when first looked up.
See docs/adding-a-method.md.
"""

from dclr.methods.registry import available_methods, get_method, register

__all__ = ["available_methods", "get_method", "register"]
