"""probe/compat.py on the installed torch and transformers: each private read it makes still exists, named by
the function that makes it, and does what probe relies on; the floors in pyproject.toml are the lowest versions
it was checked on. Run on every version compat.CHECKED names (tests/test_compat.py there, the suite on CI's)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import transformers
from torch import nn

import probe.compat as compat

ROOT = Path(__file__).resolve().parent.parent


def _config():
    return transformers.LlamaConfig(
        vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2
    )


# compat's function -> (what it reads, whether the installed version has it)
READS = {
    "hook_count": (
        "nn.Module's hook dicts",
        lambda: all(isinstance(getattr(nn.Module(), n), dict) for n in compat.HOOK_DICTS),
    ),
    "global_hooks": (
        "torch.nn.modules.module's global hook dicts",
        lambda: all(isinstance(getattr(torch.nn.modules.module, n), dict) for n in compat.GLOBAL_HOOK_DICTS),
    ),
    "child": ("nn.Module._modules", lambda: isinstance(nn.Module()._modules, dict)),
    "replace_child": ("nn.Module._modules", lambda: isinstance(nn.Module()._modules, dict)),
    "cpu_flash_attention": (
        "aten._scaled_dot_product_flash_attention_for_cpu",
        lambda: hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"),
    ),
    "FollowsApply": ("nn.Module._apply", lambda: callable(vars(nn.Module).get("_apply"))),
    "attention_implementation": ("a config's _attn_implementation", lambda: hasattr(_config(), "_attn_implementation")),
    "supports_attention_functions": (
        "PreTrainedModel._supports_attention_backend",
        lambda: transformers.LlamaForCausalLM._supports_attention_backend is True,
    ),
    "hub_source": ("config.json's _name_or_path", lambda: "_name_or_path" in _config().to_dict()),
}


def test_every_function_of_compat_has_its_read_checked_here():
    functions = {n for n, v in vars(compat).items() if callable(v) and getattr(v, "__module__", "") == compat.__name__}
    assert functions - {"set_attention_implementation"} == set(READS)


@pytest.mark.parametrize("function", sorted(READS))
def test_each_private_read_exists_on_the_installed_versions(function):
    what, present = READS[function]
    assert present(), (
        f"probe.compat.{function} reads {what}, which torch {torch.__version__} / transformers "
        f"{transformers.__version__} does not have: change it there (checked on {compat.CHECKED})"
    )


def test_hook_count_counts_every_kind_of_hook_and_global_hooks_sees_a_global_one():
    module = nn.Linear(2, 2)
    assert compat.hook_count(module) == 0 and not compat.global_hooks()
    handles = [
        module.register_forward_hook(lambda *_: None),
        module.register_forward_pre_hook(lambda *_: None),
        module.register_full_backward_hook(lambda *_: None),
        module.register_full_backward_pre_hook(lambda *_: None),
    ]
    assert compat.hook_count(module) == 4
    for handle in handles:
        handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *_: None)
    try:
        assert compat.global_hooks() and compat.hook_count(module) == 0
    finally:
        handle.remove()
    assert not compat.global_hooks()


def test_replace_child_swaps_without_torchs_registration_hooks():
    parent, other, seen = nn.Sequential(nn.Linear(2, 2)), nn.Identity(), []
    handle = torch.nn.modules.module.register_module_module_registration_hook(lambda *args: seen.append(args))
    try:
        compat.replace_child(parent, "0", other)
    finally:
        handle.remove()
    assert parent[0] is other and not seen


def test_child_reads_the_submodule_a_property_of_its_name_stands_for():
    class Shadowed(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(2, 2)

        @property
        def inner(self) -> nn.Module:
            return compat.child(self, "inner")

    module = Shadowed()
    assert isinstance(module.inner, nn.Linear) and dict(module.named_children()) == {"inner": module.inner}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [True, False])
def test_cpu_flash_attention_is_softmax_attention_with_its_log_sum_exp(dtype, causal):
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=generator, dtype=dtype) for _ in range(3))
    mask = torch.randn(3, 6, 6, generator=generator, dtype=dtype)[None]  # [1, head, query, key]
    out, lse = compat.cpu_flash_attention(q, k, v, causal, mask, 0.5)
    logits = q @ k.transpose(-1, -2) * 0.5 + mask
    if causal:
        logits = logits.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    tolerance = {"atol": 1e-5} if dtype == torch.float32 else {"atol": 1e-10}
    torch.testing.assert_close(out, torch.softmax(logits, -1) @ v, rtol=0, **tolerance)
    torch.testing.assert_close(lse, torch.logsumexp(logits, -1), rtol=0, **tolerance)


def test_follows_apply_is_told_after_every_move():
    class Told(compat.FollowsApply):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(2))
            self.seen: list[torch.dtype] = []

        def after_apply(self) -> None:
            self.seen.append(self.weight.dtype)

    module = Told()
    module.double()
    module.to(torch.float32)
    assert module.seen == [torch.float64, torch.float32]


def test_the_attention_implementation_round_trips_and_the_flag_is_read():
    config = _config()
    before = compat.attention_implementation(config)
    compat.set_attention_implementation(config, "sdpa")
    assert compat.attention_implementation(config) == "sdpa"
    compat.set_attention_implementation(config, before)
    assert compat.attention_implementation(config) == before
    assert compat.supports_attention_functions(transformers.LlamaForCausalLM(config))
    assert not compat.supports_attention_functions(nn.Linear(2, 2))


def test_hub_source_reads_what_a_saved_config_says():
    """transformers 4 wrote ``_name_or_path`` into config.json (the Hub's files hold it); 5 keeps it on the
    config (``to_dict``) and leaves it out of the file, which then says nothing."""
    saved = {"_name_or_path": "HuggingFaceTB/SmolLM2-135M", "model_type": "llama"}
    assert compat.hub_source(saved) == "HuggingFaceTB/SmolLM2-135M" and compat.hub_source({}) == ""
    config = _config()
    config._name_or_path = "HuggingFaceTB/SmolLM2-135M"
    assert compat.hub_source(config.to_dict()) == "HuggingFaceTB/SmolLM2-135M"


def test_the_floors_are_the_lowest_versions_compat_was_checked_on():
    """pyproject.toml's floors for torch and transformers are compat.CHECKED's lowest: a version below them
    was never run, and one checked lower is worth saying there."""
    dependencies = (ROOT / "pyproject.toml").read_text().split("dependencies = [", 1)[1].split("]", 1)[0]
    for package, checked in compat.CHECKED.items():
        floor = re.search(rf'"{package}>=([\d.]+)', dependencies)
        assert floor is not None, f"pyproject.toml sets no floor for {package}"
        assert _version(floor[1]) == _version(checked[0]), (package, floor[1], checked)


def _version(text: str) -> tuple[int, ...]:
    parts = tuple(int(part) for part in text.split("."))
    return parts + (0,) * (3 - len(parts))
