"""What one release of a serving engine can run of a speculative design (docs/search.md, "Exports").

An export maps a searched design onto the closest design the engine runs (pipeline/realise.py) and
prices that. The facts it needs about each engine release are data, read from
hwdb/engine-support/ENGINE.toml, each release checked against the engine's own code:

- `trees`: `chain` (the engine drafts one chain: vLLM, transformers, TensorRT-LLM's draft-target
  mode) or `topk-pool` (SGLang: each of `num_steps` steps keeps the `topk` best frontier nodes and
  adds their `topk` children each to a pool, then verifies the `num_draft_tokens - 1` best of
  the pool, so at most topk + (num_steps - 1) x topk^2 draft tokens);
- `max_batch`: the largest batch the engine's speculative mode serves (0: no limit of its own);
- `draft_dtype`: `target` (the drafter runs in the target's dtype) or `own`;
- `cost_profile`: the hwdb/engines profile that prices the engine's GPU forwards;
- `head_methods`: the method the release runs each kind of draft head or lookup with (vLLM `eagle3`,
  `ngram`; SGLang `EAGLE3`, `NGRAM`; issue 18); a kind it has none for is not exported to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dfvg_dse.specs.drafter import DRAFTER_KINDS
from dfvg_dse.specs.hardware import SpecError

TREE_RULES = ("chain", "topk-pool")
DRAFT_DTYPES = ("target", "own")
ENGINES = ("vllm", "sglang", "hf", "trtllm")  # the export formats of serving engines
MODEL_FREE_OR_HEAD = DRAFTER_KINDS[1:]  # every drafter kind but a draft model, which no method names
VERSION_RE = re.compile(r"^\d+(\.\d+)*([a-z0-9.+-]*)$")


def version_key(version: str) -> tuple:
    """Release order: numeric parts compared as numbers ('0.33.0' > '0.9.1')."""
    head = re.match(r"^[\d.]+", version)
    return tuple(int(p) for p in head.group(0).strip(".").split(".")) if head else ()


@dataclass(frozen=True)
class EngineSupport:
    """One checked release of a serving engine, as its export sees it."""

    engine: str
    version: str
    display_name: str
    cost_profile: str
    trees: str
    max_batch: int
    draft_dtype: str
    checked: str  # what of the engine's code was run or read for this release
    source: str  # the primary document: the package and files at that release
    head_methods: tuple[tuple[str, str], ...] = ()  # (draft-head kind, the engine's method name)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise SpecError("engine", self.engine, f"allowed: {', '.join(ENGINES)}")
        if not isinstance(self.version, str) or not VERSION_RE.match(self.version):
            raise SpecError("version", self.version, "a release number such as '0.33.0'")
        if self.trees not in TREE_RULES:
            raise SpecError("trees", self.trees, f"allowed: {', '.join(TREE_RULES)}")
        if self.draft_dtype not in DRAFT_DTYPES:
            raise SpecError("draft_dtype", self.draft_dtype, f"allowed: {', '.join(DRAFT_DTYPES)}")
        if isinstance(self.max_batch, bool) or not isinstance(self.max_batch, int) or self.max_batch < 0:
            raise SpecError("max_batch", self.max_batch, "an integer >= 0 (0: no limit)")
        for kind, method in self.head_methods:
            if kind not in MODEL_FREE_OR_HEAD:
                raise SpecError(f"head_methods.{kind}", method, f"kinds: {', '.join(MODEL_FREE_OR_HEAD)}")
        for name in ("display_name", "cost_profile", "checked", "source"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise SpecError(name, getattr(self, name), "must be a non-empty string")

    def head_method(self, kind: str) -> str | None:
        """The method this release runs a draft head of `kind` with; None when it runs none."""
        return dict(self.head_methods).get(kind)

    def batch(self, searched: int) -> int:
        """The batch this release serves of a design searched at `searched` sequences."""
        return searched if self.max_batch == 0 else min(searched, self.max_batch)


def pool_size(steps: int, topk: int) -> int:
    """Draft tokens a top-k pool of `steps` steps holds: topk + (steps - 1) x topk^2."""
    return topk + (steps - 1) * topk * topk if steps > 0 else 0
