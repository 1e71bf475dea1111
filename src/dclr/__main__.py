from dclr.cli import app

app(prog_name="dclr")
