"""The attention layer's shape (issue 51, item 1): an intervention is an edit the layer holds, not a hook; two
routes chosen in one table; the core imports a protocol, not the plug-in; a forward a reader can hold."""

from __future__ import annotations

import ast
import inspect

import pytest
import torch
from helpers import tiny_model

import probe.models.attention as attention
from probe.models import build_model
from probe.models.attach import attach, attached, detach
from probe.models.attention import REFERENCE_ONLY, PEAttention, is_hooked
from probe.models.interventions import Intervention

VOCAB = 20


def model_of(pe: str):
    return build_model(pe, vocab_size=VOCAB, preset="tiny", seed=0, **tiny_model(n_ctx=64)).eval()


def test_the_layer_imports_the_edit_protocol_not_the_plug_in():
    tree = ast.parse(inspect.getsource(attention))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "probe.models.attention_edit" in imported
    assert not imported & {"probe.models.attach", "probe.models.interventions", "probe.models.intervention_hooks"}


def test_forward_reads_in_under_30_lines():
    """Its statements, the docstring left out, span fewer than 30 lines: nanoGPT's attention, one dispatch."""
    (function,) = ast.parse(inspect.getsource(PEAttention.forward).strip()).body
    statements = function.body[1:] if isinstance(function.body[0], ast.Expr) else function.body
    assert statements[-1].end_lineno - statements[0].lineno + 1 < 30


@pytest.mark.parametrize("pe, spec", [("t5", "cap=6+window=5"), ("rotary", "cap=5+temperature=0.7")])
def test_an_attached_intervention_is_an_edit_on_each_layer_and_no_hook(pe, spec):
    from probe.models.interventions import parse_intervention

    model, x = model_of(pe), torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    plain = model(x)
    attach(model, parse_intervention(spec))
    assert not any(is_hooked(point) for point in model.hook_dict.values())
    assert all(block.attn.edit is not None and block.attn.uses_fast_path() for block in model.blocks)
    assert not torch.allclose(model(x), plain)
    detach(model)
    assert all(block.attn.edit is None for block in model.blocks) and torch.equal(model(x), plain)


def test_run_with_cache_asks_for_the_reference_route_by_name(monkeypatch):
    """Even when it caches no score or pattern: the route is asked for, not inferred from what is hooked."""
    model, x = model_of("alibi"), torch.randint(0, VOCAB, (1, 12))
    fused = []
    real = attention.fused_attention
    monkeypatch.setattr(attention, "fused_attention", lambda *a: fused.append(1) or real(*a))
    with attached(model, Intervention(temperature=0.5)):
        model(x)
        assert len(fused) == model.cfg.n_layers
        model.run_with_cache(x, names_filter=lambda name: name.endswith("hook_resid_post"))
    assert len(fused) == model.cfg.n_layers
    assert all(block.attn.uses_fast_path() for block in model.blocks)  # asked for within the call only


def test_the_compatibility_table_says_why_and_decides_alone():
    model = model_of("rotary")
    cope, rotary = model_of("cope").blocks[0].attn, model.blocks[0].attn
    assert all(isinstance(why, str) and why for why, _ in REFERENCE_ONLY)
    assert cope.route() == "reference" and rotary.route() == "fused"
    model.set_fast_attention(False)
    assert rotary.route() == "reference"
    model.set_fast_attention(True)
    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", lambda p, hook: p)]):
        assert rotary.route() == "reference"
    with attached(model, Intervention(cap=4)):
        assert rotary.route(key_len=10) == "fused" and rotary.route(key_len=5, offset=3) == "fused"
        assert rotary.route(key_len=10, offset=3) == "reference"  # far keys against a cache: refused there
        assert rotary.route(key_len=10, dropout=0.1) == "reference"


def test_what_the_configuration_rules_out_is_settled_when_the_layer_is_built(monkeypatch):
    """As in x-transformers' Attend: CoPE's layer knows from its construction that it never fuses; the table's
    per-call rows are what a pass reads."""
    cope, rotary = model_of("cope").blocks[0].attn, model_of("rotary").blocks[0].attn
    built = [why for why, holds in REFERENCE_ONLY if isinstance(holds, attention.WhenBuilt)]
    assert cope.reference_only in built and rotary.reference_only is None
    monkeypatch.setattr(attention, "REFERENCE_ONLY", ())  # a pass no longer reads any row ...
    assert cope.route() == "reference" and rotary.route() == "fused"  # ... and CoPE's was read when built
