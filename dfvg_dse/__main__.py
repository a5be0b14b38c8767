"""`python -m dfvg_dse` runs the command line."""

from dfvg_dse.cli import cli

if __name__ == "__main__":
    cli()
