"""Every shipped model's parameter count against transformers' own model classes (issue 17).

transformers builds each architecture from the [config] table on the meta device (no memory, no
weights) and counts what its checkpoint stores; our closed-form counts (costs/work.py) must equal them exactly.
This is the independent computation for every family we read, dense and mixture-of-experts alike.
"""

from __future__ import annotations

import pytest

from dfvg_dse.catalog import Catalog
from dfvg_dse.costs.work import param_counts

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.torch

CATALOG = Catalog.open("models", "hwdb")
# Models whose architecture transformers cannot build from a config alone, with the reason.
NOT_IN_TRANSFORMERS: dict[str, str] = {}


def _transformers_count(config: dict) -> int:
    fields = {k: v for k, v in config.items() if k not in ("architectures", "model_type")}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    # What the checkpoint stores: parameters and persistent buffers (DeepSeek-V3's score-correction
    # bias); a tied embedding is one tensor, counted once (keep_vars gives the shared object twice).
    tensors = {id(t): t for t in model.state_dict(keep_vars=True).values()}
    return sum(t.numel() for t in tensors.values())


@pytest.mark.parametrize("entry", CATALOG.model_entries(), ids=lambda e: e.spec.name)
def test_count_equals_transformers(entry):
    if entry.spec.name in NOT_IN_TRANSFORMERS:
        pytest.skip(NOT_IN_TRANSFORMERS[entry.spec.name])
    assert param_counts(entry.spec).total == _transformers_count(entry.config), entry.spec.name
