"""Experiments that keep their runs and their report section side by side: a module holds one
study or a few close ones, each with a `*specs()` that lists its runs
(`dclr_lab.runspec.RunSpec`) and a `section*()` that writes its part of `dclr report`
(`dclr_lab.render.Report`). `dclr_lab.specs.EXPERIMENTS` and
`dclr_lab.report.SECTIONS` name them.

- `dclr_paper`: main, ablation, uniformity, few-shot, sensitivity (the DCLR paper's STS studies)
- `augmentations`: each positive view with SimCSE and DCLR
- `dense`: dense, dup-corpus, noise-mode (the false-negative studies)
- `retrieval_indomain`: refinement on a retrieval task's passages
- `consert`: consert-augmentations, consert-few-shot
- `dualcse`: dualcse-inli
- `search_trials`: the report of a hyper-parameter search (`search:NAME`)
- `shared`: the report pieces several of them write
"""
