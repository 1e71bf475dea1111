"""Torch-free options: the recipe schema (`config`: core sections, overrides, loading) and each
built-in method's section (`contrastive`, `dclr`, `nli`, `dualcse`), each declared once.

Below the contract, the losses and the loop, above `data`, `models` and `views` (whose names and
checks they use): reading a recipe or `--help` imports no torch.
"""
