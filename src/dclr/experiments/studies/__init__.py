"""Experiments that keep their runs and their report section side by side, one module a study:
`specs()` lists the runs (`dclr.experiments.runspec.RunSpec`), `section_*` writes its part of
`dclr report` (`dclr.experiments.render.Report`). `dclr.experiments.specs.EXPERIMENTS` and
`dclr.experiments.report.SECTIONS` name them.
"""
