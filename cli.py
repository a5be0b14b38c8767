"""Development shim: `python cli.py ...` from a checkout runs the same command line as `dfvg-dse`."""
from dfvg_dse.cli import cli

if __name__ == "__main__":
    cli()
