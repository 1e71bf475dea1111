"""`python -m dclr`: the CLI, without the current folder on the import path.

`python -m` puts the current folder first on `sys.path`, so a folder someone runs dclr from (an
index folder they downloaded, say) could shadow any module dclr imports later. dclr is an
installed package and needs no such entry, so it is removed before anything else is imported
(`python -P` does the same).
"""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    sys.path.pop(0)

from dclr.cli.main import app  # noqa: E402

app(prog_name="dclr")
