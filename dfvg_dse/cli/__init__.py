"""The command line (`dfvg-dse`): one root group; each module registers its noun groups on it."""

from dfvg_dse.cli import decoding, hardware, pipeline, reference, search, validation  # noqa: F401  (registers the commands)
from dfvg_dse.cli._base import cli

__all__ = ["cli"]
