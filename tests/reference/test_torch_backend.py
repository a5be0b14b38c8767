"""The torch backend of the reference decoder (issue 19) against the numpy engine, its parity
reference: float32 gives the numpy engine's logits and tokens; bfloat16 stays within a stated bound
of them and is lossless within itself (speculative output = its own autoregressive output)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli
from dfvg_dse.reference import KVCache, ReferenceConfig, forward, generate_ar, generate_speculative, random_weights
from dfvg_dse.reference.speculative import Model, load_model
from dfvg_dse.reference.stages import Job, TwoStageRuntime
from dfvg_dse.reference.torch_lm import TorchKVCache, TorchModel, torch_forward
from dfvg_dse.specs import InputError
from dfvg_dse.specs.backend import ReferenceBackend
from tests.reference.test_tiny_lm import SHAPES, spec_for

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

FLOAT32 = ReferenceBackend("torch", "float32")
BFLOAT16 = ReferenceBackend("torch", "bfloat16")
# bfloat16 keeps 8 significant bits (relative step 2^-8 = 0.4%); over 2 layers of random weights
# the logits stay within 1% of their spread (measured: 0.25-0.31% for llama, mistral, qwen3, OPT)
BF16_LOGIT_BOUND = 0.01


def _both(name: str, backend: ReferenceBackend, seed: int = 1):
    spec = spec_for(name)
    config = ReferenceConfig(spec, rms_norm_eps=1e-6)
    w = random_weights(spec, seed=seed)
    return w, config, load_model(w, config, backend)


def _run_sequence(run, tokens):
    """A prompt of 4 in one forward, then one token at a time: the logits of every position."""
    first = run(tokens[:4], np.arange(4), None)
    steps = [run([t], [i], None) for i, t in enumerate(tokens[4:], 4)]
    return np.concatenate([first, *steps])


@pytest.mark.parametrize("name", list(SHAPES))
def test_float32_gives_the_numpy_engines_logits(name):
    w, config, model = _both(name, FLOAT32)
    tokens = [3, 17, 5, 42, 8, 0, 21]
    cache = KVCache(config.spec.n_layers)
    expected = _run_sequence(lambda t, p, par: forward(w, config, t, p, cache, par), tokens)
    got = _run_sequence(lambda t, p, par: model.run(t, p, par), tokens)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["llama", "qwen3", "opt"])
def test_tree_forward_and_rollback_match_the_numpy_engine(name):
    w, config, model = _both(name, FLOAT32, seed=2)
    parents, tokens, positions = [-1, 0, 0, 1, 1, 2], [7, 9, 11, 13, 15, 17], [3, 4, 4, 5, 5, 5]
    cache = KVCache(config.spec.n_layers)
    forward(w, config, [1, 2, 3], np.arange(3), cache)
    model.run([1, 2, 3], np.arange(3))
    np.testing.assert_allclose(model.run(tokens, positions, parents), forward(w, config, tokens, positions, cache, parents),
                               rtol=1e-5, atol=1e-5)
    cache.keep(3, [0, 2, 5])  # the accepted path 0 -> 2 -> 5
    model.cache.keep(3, [0, 2, 5])
    assert model.cache.length == cache.length == 6
    for layer in range(config.spec.n_layers):
        np.testing.assert_allclose(model.cache.k[layer], cache.k[layer], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(model.cache.v[layer], cache.v[layer], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(model.run([4], [6]), forward(w, config, [4], [6], cache), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["mistral", "qwen3", "opt"])
def test_bfloat16_logits_stay_within_the_stated_bound(name):
    w, config, model = _both(name, BFLOAT16)
    tokens = [3, 17, 5, 42, 8, 0, 21, 9, 30]
    cache = KVCache(config.spec.n_layers)
    expected = _run_sequence(lambda t, p, par: forward(w, config, t, p, cache, par), tokens)
    got = _run_sequence(lambda t, p, par: model.run(t, p, par), tokens)
    assert got.dtype == np.float32
    error = np.abs(got - expected).max() / (expected.max() - expected.min())
    assert 0 < error < BF16_LOGIT_BOUND  # bfloat16 really ran (not float32) and stays close


def test_a_row_gets_the_same_bits_alone_or_among_others():
    # the property that keeps bfloat16 verification lossless: oneDNN's product of k rows gives each
    # row the bits it gets alone
    w, config, model = _both("mistral", BFLOAT16, seed=4)
    model.run([1, 2, 3], np.arange(3))
    chain = model.run([5, 6, 7, 8], [3, 4, 5, 6])
    model.cache.keep(3, [])
    alone = np.concatenate([model.run([t], [p]) for t, p in zip([5, 6, 7, 8], [3, 4, 5, 6])])
    np.testing.assert_array_equal(chain, alone)


def _shipped(backend):
    from dfvg_dse.catalog import Catalog
    from dfvg_dse.catalog.checkpoints import forward_settings

    catalog = Catalog.open()
    out = []
    for role in ("target", "draft"):
        config, spec, tensors, path = catalog.read_checkpoint("builtin:tiny", role)
        rope, eps = forward_settings(path, config, spec)
        out.append(load_model(tensors, ReferenceConfig(spec, rope=rope, rms_norm_eps=eps), backend))
    return out


PROMPTS = [list(b"The quick brown fox "), list(b"Once upon a time, "), list(b"In the beginning ")]


@pytest.mark.parametrize("backend", [FLOAT32, BFLOAT16], ids=["float32", "bfloat16"])
def test_speculative_output_is_the_backends_own_autoregressive_output(backend):
    target, draft = _shipped(backend)
    numpy_target, _ = _shipped(ReferenceBackend())
    for prompt in PROMPTS:
        ar = generate_ar(target.fresh(), prompt, 48)
        for parents, ranks in (([-1, 0, 1, 2, 3], [0] * 5), ([-1, 0, 0, 1, 2, 1], [0, 0, 1, 0, 0, 1])):
            spec, _ = generate_speculative(target.fresh(), draft.fresh(), prompt, 48, parents=parents, ranks=ranks)
            assert spec == ar
        if backend is FLOAT32:  # float32 torch writes the numpy engine's tokens
            assert ar == generate_ar(numpy_target.fresh(), prompt, 48)


def test_both_stages_run_torch_in_their_own_processes():
    target, draft = _shipped(BFLOAT16)
    prompt = tuple(PROMPTS[0])
    expected = generate_ar(target.fresh(), list(prompt), 40)
    with TwoStageRuntime(target, draft, pin=False) as runtime:
        for schedule in ("sequential", "overlap"):
            result = runtime.run(Job(prompt, 40, ((-1, 0, 1, 2), (0, 0, 0, 0)), schedule=schedule))
            assert list(result.tokens) == expected and result.rounds < 40


def test_the_torch_model_keeps_the_model_contract():
    w, config, model = _both("llama", FLOAT32)
    assert isinstance(model, TorchModel) and isinstance(model.cache, TorchKVCache)
    copy = model.fresh()
    assert copy.tensors is model.tensors and copy.cache is not model.cache and copy.cache.length == 0
    assert isinstance(load_model(w, config), Model)  # numpy stays the default
    logits, hidden = torch_forward(model.tensors, config, [1, 2], [0, 1], TorchKVCache(config.spec.n_layers),
                                   with_features=True)
    assert logits.shape == (2, config.spec.vocab_size) and hidden.shape == (2, config.spec.d_model)


@pytest.mark.parametrize("fields, message", [
    (("tensorflow",), "--backend 'tensorflow': allowed: numpy, torch"),
    (("numpy", "bfloat16"), "--dtype 'bfloat16' with --backend numpy: allowed: float32"),
    (("torch", "float16"), "--dtype 'float16' with --backend torch: allowed: float32, bfloat16"),
    (("torch", "float32", "gpu"), "--torch-device 'gpu': allowed: cpu, cuda, cuda:N"),
    (("numpy", "float32", "cuda"), "the numpy backend runs on the CPU"),
])
def test_a_bad_backend_is_one_line(fields, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ReferenceBackend(*fields)


def test_reference_generate_on_torch_bfloat16_from_the_command_line():
    runner = CliRunner()
    args = ["reference", "generate", "--prompt", "The quick brown fox ", "--max-new-tokens", "24", "--json", "--no-pin"]
    numpy_run = json.loads(runner.invoke(cli, args).output)
    torch_run = json.loads(runner.invoke(cli, args + ["--backend", "torch", "--dtype", "float32"]).output)
    assert torch_run["tokens"] == numpy_run["tokens"] and torch_run["backend"] == "torch float32 on cpu"
    bad = runner.invoke(cli, args + ["--dtype", "bfloat16"])
    assert bad.exit_code == 2 and "--dtype 'bfloat16' with --backend numpy" in bad.output
    head = runner.invoke(cli, args + ["--backend", "torch", "--draft", "builtin:tiny-eagle"])
    assert head.exit_code == 2 and "numpy backend only" in head.output
    # a numpy head beside a torch target: the features cross backends, the output stays the target's
    mixed = json.loads(runner.invoke(cli, args + ["--backend", "torch", "--draft", "builtin:tiny-eagle",
                                                  "--draft-backend", "numpy"]).output)
    assert mixed["tokens"] == numpy_run["tokens"] and mixed["backend"] == "torch float32 on cpu, draft numpy float32"
    unused = runner.invoke(cli, args + ["--mode", "ar", "--draft-backend", "numpy"])
    assert unused.exit_code == 2
