"""Positive views for contrastive learning (ConSERT, Yan et al. 2021), built from outside the model.

Each strategy is a pure function of the tokenized batch and a seeded `torch.Generator`, and acts
only through the backbone's public inputs (`inputs_embeds`, `position_ids`): no model class is
forked. Special tokens ([CLS], [SEP], <s>, ...) and padding are never cut or shuffled.

- `masks`: which positions a view may touch (real, non-special tokens).
- `shuffle`: token shuffle, a permutation of the position ids of the real tokens.
- `cutoff`: token / span / feature cutoff, zeroing parts of the input embeddings.
- `adversarial`: an FGSM-style perturbation of the input embeddings from a loss gradient.
- `strategies`: the option names and their validation.
- `pair`: `PositiveViews`, two strategies (view 1 / view 2) encoded by a model.

Import from the modules (`dclr.views.strategies` is torch-free: the config and `--help` read it).
"""
