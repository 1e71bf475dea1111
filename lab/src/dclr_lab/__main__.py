"""`python -m dclr_lab`: dclr's command line with the lab's commands, installed or not."""

from dclr_lab.cli import app_with_lab

if __name__ == "__main__":
    app_with_lab()(prog_name="dclr")
