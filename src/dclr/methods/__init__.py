"""Training methods as plugins: each defines its config section, builders and objective.

`dclr.methods.registry.get_method(name)` finds one (a recipe's `method:`): the built-in methods
(simcse, consert, dclr, nli, dualcse, simcse_sup), those of installed packages (entry-point group
`dclr.methods`) and those added with `register(method)`. See docs/adding-a-method.md.
"""
