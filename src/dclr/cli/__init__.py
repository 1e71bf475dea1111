"""Every command-line face of dclr, in one folder (the top layer of the package: it imports the
library, and nothing in the library imports it).

- `main`: the `dclr` app (`app`, the console entry point `dclr.cli.main:app`): training,
  evaluation, encoding, data, and the command groups of installed packages (the `dclr.cli`
  entry-point group);
- `serving`: `dclr encode-bulk`, `index`, `search` and `serve` (its options generated from
  `dclr.serving.settings.ServeSettings`);
- `dualcse`: `dclr dualcse ...`;
- `tools`: what the command groups share (consoles, the error exit, score tables, help text).
"""
