"""Errors of the pure MIG core: one class per way user input can be wrong.

Every message is a single line that names the problem and the accepted form, so the CLI, the function's
decisions and the node's result can show it as it is.
"""


class MigInputError(ValueError):
    """Base class: the input (GPU name, label value, profile list) cannot be used. Exit code 2."""


class UnknownGpuError(MigInputError):
    """The GPU name or PCI id is not in the catalogue."""


class LabelError(MigInputError):
    """A partition label value does not parse (commas, empty items, unknown profiles, both labels...)."""


class PlacementError(MigInputError):
    """The profiles parse, but the GPU cannot hold them all at once."""


class GpuWithoutMigError(UnknownGpuError):
    """The GPU is known, but has no MIG at all (A10, L20, T4, V100...)."""
