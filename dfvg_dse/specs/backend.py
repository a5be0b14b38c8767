"""Which engine runs the reference decoder's forwards (issue 19): the numpy engine (float32, the
parity reference) or torch (float32 or bfloat16, on the CPU or a CUDA device)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dfvg_dse.specs.hardware import InputError

BACKENDS = ("numpy", "torch")
BACKEND_DTYPES = {"numpy": ("float32",), "torch": ("float32", "bfloat16")}
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


@dataclass(frozen=True)
class ReferenceBackend:
    """`name` (numpy | torch), the dtype of weights and activations, and the torch device."""

    name: str = "numpy"
    dtype: str = "float32"
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise InputError(f"--backend {self.name!r}: allowed: {', '.join(BACKENDS)}")
        if self.dtype not in BACKEND_DTYPES[self.name]:
            raise InputError(f"--dtype {self.dtype!r} with --backend {self.name}: allowed: "
                             f"{', '.join(BACKEND_DTYPES[self.name])}")
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise InputError(f"--torch-device {self.device!r}: allowed: cpu, cuda, cuda:N")
        if self.name == "numpy" and self.device != "cpu":
            raise InputError(f"--torch-device {self.device}: the numpy backend runs on the CPU; "
                             "add --backend torch")

    @property
    def label(self) -> str:
        """How reports name it: 'numpy float32', 'torch bfloat16 on cpu'."""
        return f"numpy {self.dtype}" if self.name == "numpy" else f"torch {self.dtype} on {self.device}"


NUMPY = ReferenceBackend()


def stage_backends(name: str, dtype: str, device: str, draft_name: str | None = None) -> tuple[ReferenceBackend,
                                                                                                ReferenceBackend]:
    """The target's backend and the draft's: the same unless `draft_name` differs (a numpy draft
    runs float32 on the CPU; a torch one takes the target's dtype and device)."""
    target = ReferenceBackend(name, dtype, device)
    if draft_name is None or draft_name == name:
        return target, target
    if draft_name == "numpy":
        return target, NUMPY
    return target, ReferenceBackend(draft_name, dtype, device)


def pair_label(target: ReferenceBackend, draft: ReferenceBackend) -> str:
    """'torch bfloat16 on cpu', or with a draft elsewhere 'torch bfloat16 on cpu, draft numpy float32'."""
    return target.label if draft == target else f"{target.label}, draft {draft.label}"
