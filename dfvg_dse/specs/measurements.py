"""Published measurements the cost model is fitted to and judged by (docs/measurements.md).

A ForwardMeasurement is one timed forward setting of a serving engine on a GPU: the settings it was
run in and the figure as published, turned into the time of one forward (`forward_time_s`) at the
tokens and context the cost model prices (`priced_tokens`, `priced_context`). A SpeculativeResult
is a published speedup of a drafter and tree over the same engine's plain decoding: never fitted,
only predicted.
"""

from __future__ import annotations

from dataclasses import dataclass

ENGINES = ("vllm", "sglang", "trtllm", "gpt-fast", "llama.cpp", "hf", "exllamav2", "mlc-llm", "torch", "other")
# Engines that launch every kernel from Python, one at a time (no CUDA graphs, no compiled step):
# their host overheads are of another population than the graph-captured engines' (docs/engines.md)
EAGER_ENGINES = ("hf", "torch")
# Kernel families: engines that run the same kind of kernels, so an engine (or a source left out) with
# few rows borrows from its family before the pooled profile (validation/engines.py). "tuned": CUDA
# graphs over vendor-tuned GEMMs (cuBLAS / CUTLASS) and fused flash attention — TensorRT-LLM, vLLM,
# SGLang, and gpt-fast's torch.compile'd step; "ggml": llama.cpp's own CUDA kernels (MMQ / MMVQ,
# cuBLAS for 16-bit prefill GEMMs). An engine not listed (the eager ones among them: their host time
# is no sample of another's, EAGER_ENGINES) is tied to the pooled profile directly.
ENGINE_FAMILIES = {"trtllm": "tuned", "vllm": "tuned", "sglang": "tuned", "gpt-fast": "tuned", "llama.cpp": "ggml"}
PHASES = ("decode", "prefill", "generate", "forward")
METRICS = ("tokens_per_s", "ms_per_token", "ms")
# the metrics each phase may give (a decode "ms" would be a whole generation: ambiguous)
PHASE_METRICS = {"decode": ("tokens_per_s", "ms_per_token"), "prefill": ("tokens_per_s", "ms"),
                 "generate": ("tokens_per_s", "ms"), "forward": ("ms",)}
MEASURED_DTYPES = ("float32", "float16", "bfloat16", "fp8", "int8", "int4", "fp4")
MS_PER_S = 1e3
# How each published method drafts, which decides what its drafting costs (validation/fidelity.py):
# "model" a separate draft model (the row's `draft`), "head" heads on the target's features (one
# decoder layer and an LM head: EAGLE, Medusa, Hydra), "lookup" no network at all — n-grams from
# the prompt (PLD), a datastore (REST), the target's own Jacobi branch inside the verify forward
# (Lookahead; that branch's tokens are the row's `branch_tokens`, priced in the verify) or recycled
# candidates (Token Recycling): host work priced at nothing.
METHOD_DRAFTERS = {"chain": "model", "sequoia": "model", "specinfer": "model",
                   "eagle": "head", "eagle2": "head", "eagle3": "head", "medusa": "head", "hydra": "head",
                   "samd-eagle2": "head", "pld": "lookup", "rest": "lookup", "lookahead": "lookup",
                   "recycling": "lookup"}
# Heads that predict over a reduced vocabulary: EAGLE-3's released heads map to the target's
# vocabulary from a 32,000-token draft vocabulary (draft_vocab_size 32000 in the config.json of
# yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, https://huggingface.co/yuhuili/EAGLE3-LLaMA3.1-Instruct-8B).
HEAD_DRAFT_VOCAB = {"eagle3": 32000}
# The draft-head kind (specs/drafter.py) each EAGLE method's head is: EAGLE-2 and SAM-Decoding's
# fallback run EAGLE-1's head; Medusa rows run Medusa-1's heads. Hydra (sequentially dependent
# heads) is priced as one layer and the LM head (fidelity.py).
METHOD_HEAD_KINDS = {"eagle": "eagle", "eagle2": "eagle", "samd-eagle2": "eagle", "eagle3": "eagle3",
                     "medusa": "medusa"}
# Medusa-1's released heads (FasterDecoding/medusa-vicuna-{7b,13b,33b}-v1.3, the checkpoints Spec-Bench
# ran; their config.json: medusa_num_heads 5, medusa_num_layers 1): (heads, residual blocks per head)
MEDUSA_PUBLISHED_SHAPE = (5, 1)


@dataclass(frozen=True)
class ForwardMeasurement:
    """One published forward setting and its figure. `bits_per_weight` > 0 overrides the dtype's
    width plus group scales (llama.cpp k-quants publish their mean bits per weight)."""

    source: str  # the measurement file's id
    where: str  # table / figure in the source
    engine: str
    device: str
    model: str
    dtype: str
    batch: int
    phase: str
    prompt_tokens: int
    generated_tokens: int
    metric: str
    value: float
    group_size: int = 0
    quant: str = ""
    bits_per_weight: float = 0.0
    kv_dtype: str = "float16"
    tensor_parallel: int = 1

    @property
    def priced_forwards(self) -> tuple[tuple[int, float, int], ...]:
        """The forwards the measured time covers, as (new tokens, context, count): a decode step, a
        prefill, or a whole generation (its prefill and G decode steps). A decode rate over G tokens
        after a prompt of P is the mean step, priced at context P + (G - 1) / 2 (docs/measurements.md)."""
        step = (1, self.prompt_tokens + (self.generated_tokens - 1) / 2.0)
        if self.phase == "forward":  # one forward of the new tokens over the cached prompt (a verify)
            return ((self.generated_tokens, float(self.prompt_tokens), 1),)
        if self.phase == "decode":
            return ((*step, 1),)
        if self.phase == "prefill":
            return ((self.prompt_tokens, 0.0, 1),)
        return ((self.prompt_tokens, 0.0, 1), (*step, self.generated_tokens))

    @property
    def measured_time_s(self) -> float:
        """The measured time of what `priced_forwards` lists, for the whole batch, in seconds."""
        if self.metric in ("ms_per_token", "ms"):
            return self.value / MS_PER_S
        per_sequence = {"decode": 1, "prefill": self.prompt_tokens, "generate": self.generated_tokens,
                        "forward": self.generated_tokens}[self.phase]
        return self.batch * per_sequence / self.value  # rates are summed over the batch

    @property
    def category(self) -> str:
        """The report's category: quantised (weights below 16 bits), else the phase."""
        return "quantised" if self.dtype not in ("float32", "float16", "bfloat16") else self.phase


@dataclass(frozen=True)
class SpeculativeResult:
    """A published speculative speedup and the accepted tokens per round it was measured with."""

    source: str
    where: str
    engine: str
    device: str
    target: str
    draft: str  # "" for heads (Medusa, EAGLE) that are no separate model
    method: str
    tree_tokens: int
    tree_depth: int
    dtype: str
    batch: int
    temperature: float
    mean_accepted_tokens: float
    speedup: float
    ms_per_token: float = 0.0
    draft_engine: str = ""  # the engine the drafting ran in, where not the source's (Sequoia: CUDA graphs)
    branch_tokens: int = 0  # tokens each verify forward also computes beyond the tree (Lookahead's Jacobi window)

    @property
    def drafting_engine(self) -> str:
        """The engine whose profile prices the drafting: `draft_engine`, else the source's."""
        return self.draft_engine or self.engine


@dataclass(frozen=True)
class ServingResult(SpeculativeResult):
    """A published throughput speedup of speculative decoding in a serving engine under load: each of
    `requests` requests of `workload` (a paired trace, models/workloads/) served `batch` times at once,
    with and without speculation, the speedup the ratio of the two runs' generated tokens per second."""

    workload: str = ""
    requests: int = 1


@dataclass(frozen=True)
class MeasurementSource:
    """One measurement file: its provenance and rows (forward, speculative or serving)."""

    id: str
    kind: str  # "forward", "speculative" or "serving"
    title: str
    url: str
    engine: str
    engine_version: str
    published: str
    rows: tuple  # of ForwardMeasurement, SpeculativeResult or ServingResult
    path: str = ""
