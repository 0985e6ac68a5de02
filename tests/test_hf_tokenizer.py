"""A model carries its task's tokenizer for Hugging Face: TransformerLens' string habits work on a
trained checkpoint and agree with probe's own tokenizer and `probe eval`'s greedy decoding."""

from __future__ import annotations

import pytest
import torch
import transformer_lens.utilities as tl_utils
from helpers import tiny_model
from safetensors.torch import load_file

from probe.errors import ProbeError
from probe.models import build_model, load_checkpoint
from probe.tasks import SCRATCHPAD_TASKS, TASKS, Tokenizer, get
from probe.tasks.decoding import evaluate_examples
from probe.tasks.words import vocabulary_of
from probe.training.bookkeeping import train_run
from probe.training.loop import Trainer
from probe.training.train_config import TrainConfig

CPU = torch.device("cpu")
SMALL = tiny_model(2)
CONFIG = TrainConfig(task="scan", pe="t5", steps=200, lr=3e-3, batch_size=32, eval_examples=8, model=SMALL)


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    """A SCAN checkpoint trained just enough to end most answers with <eos>, loaded, and a few examples."""
    path = tmp_path_factory.mktemp("runs") / "scan"
    train_run(CONFIG, path, CPU)
    task = get("scan")
    return path, load_checkpoint(path), Tokenizer.for_task(task), task.examples("valid", 8, seed=0)


@pytest.mark.parametrize(
    "name, scratchpad",
    [
        *((name, None) for name in TASKS),
        *((name, "full") for name in SCRATCHPAD_TASKS),  # "... is 5 3." glued punctuation
    ],
)
def test_hf_ids_and_text_equal_ours_on_task_texts(name, scratchpad):
    task = get(name, **({"scratchpad": scratchpad} if scratchpad else {}))
    ours = Tokenizer.for_task(task)
    hf = ours.to_hf()
    for example in (e for split in ("train", "valid", "test") for e in task.examples(split, 10, seed=2)):
        for text in (example.source, example.target):
            ids = hf(text)["input_ids"]
            assert ids == [ours.bos_id, *ours.encode(text)], text
            assert hf.decode(ids, skip_special_tokens=True) == ours.decode(ids) == text


def test_glued_punctuation_and_unknown_words():
    texts = [
        "The answer is 5 5 6 4 3.",
        "Which is equal to 3 .",
        "If a = -1; b = -a. Then what is b?",
        "3 1, 4 1 , 5",
        "5..",
        "x?. ..",
        "a,. b",
    ]
    ours = Tokenizer(vocabulary_of(*texts))
    hf = ours.to_hf()
    for text in texts:
        assert hf(text, add_special_tokens=False)["input_ids"] == ours.encode(text), text
        assert hf.convert_ids_to_tokens(ours.encode(text)) == hf.tokenize(text)
    assert hf.tokenize("x?. ..") == ["x", "##?", "##.", ".", "##."]
    assert [hf.bos_token_id, hf.pad_token_id, hf.eos_token_id, hf.sep_token_id] == [0, 1, 2, 3]
    assert hf("a <sep> b<eos>", add_special_tokens=False)["input_ids"] == [*ours.encode("a"), 3, *ours.encode("b"), 2]
    with pytest.raises(ProbeError, match="unknown word"):
        ours.encode("The answer is 7")
    with pytest.raises(Exception, match="UNK"):  # no id of its own: same ids as ours, or an error
        hf("The answer is 7")


def test_loaded_and_training_models_carry_the_tokenizer_without_changing_weights(scan, tmp_path):
    path, model, tokenizer, _ = scan
    assert model.cfg.d_vocab == len(tokenizer) == model.metadata["model"]["d_vocab"]
    saved = load_file(str(path / "model.safetensors"))
    assert all(torch.equal(saved[name], value) for name, value in model.state_dict().items())
    trainer = Trainer(CONFIG, tmp_path / "fresh", CPU)
    assert trainer.model.to_tokens("walk twice <sep>").tolist() == [tokenizer.encode_prompt("walk twice")]
    with pytest.raises(ProbeError, match="does not fit"):
        tokenizer.attach_to(build_model("nope", vocab_size=len(tokenizer) - 1, **SMALL))


def test_to_tokens_to_str_tokens_and_to_string_round_trip(scan):
    _, model, tokenizer, examples = scan
    for example in examples:
        prompt = f"{example.source} <sep>"
        tokens = model.to_tokens(prompt)  # [1, pos]
        assert tokens.tolist() == [tokenizer.encode_prompt(example.source)]
        assert model.to_tokens(example.target, prepend_bos=False).tolist() == [tokenizer.encode(example.target)]
        assert model.to_str_tokens(prompt) == [tokenizer.vocab[i] for i in tokenizer.encode_prompt(example.source)]
        assert model.to_string(tokens[0]) == f"<bos> {prompt}"
        assert model.to_string(tokenizer.encode(example.target)) == example.target
    batch = model.to_tokens(["walk", "walk twice"])  # [2, pos]: right-padded with <pad>
    bos = [tokenizer.bos_id]
    assert batch.tolist() == [bos + tokenizer.encode("walk") + [tokenizer.pad_id], bos + tokenizer.encode("walk twice")]


def test_greedy_generate_stops_at_eos_and_equals_probe_eval(scan):
    _, model, tokenizer, examples = scan
    stopped = 0
    for example in examples:
        limit = len(tokenizer.encode(example.target)) + 1  # what probe eval allows one example alone
        (prediction,) = evaluate_examples(model, tokenizer, [example], keep_predictions=True).predictions
        prompt = torch.tensor([tokenizer.encode_prompt(example.source)])  # [1, prompt]
        out = model.generate(prompt, max_new_tokens=limit, do_sample=False, verbose=False)  # [1, prompt + new]
        new = out[0, prompt.shape[1] :].tolist()
        if tokenizer.eos_id in new:
            assert new.index(tokenizer.eos_id) == len(new) - 1  # stopped right there
            stopped += 1
        assert tokenizer.decode(new) == prediction
        text = model.generate(f"{example.source} <sep>", max_new_tokens=limit, do_sample=False, verbose=False)
        assert text == " ".join(filter(None, [example.source, prediction]))  # <bos>, <sep>, <eos> skipped
    assert stopped >= 2  # a real stop, not just max_new_tokens running out


def test_test_prompt_prints_the_answer_rank(scan, capsys):
    _, model, tokenizer, examples = scan
    example = examples[0]
    first = example.target.split()[0]
    logits = model(torch.tensor([tokenizer.encode_prompt(example.source)]))[0, -1]  # [d_vocab]
    rank = int((logits > logits[tokenizer.encode(first)[0]]).sum())
    tl_utils.test_prompt(f"{example.source} <sep>", first, model, top_k=3)
    out = capsys.readouterr().out
    assert f"Tokenized prompt: {['<bos>', *example.source.split(), '<sep>']}" in out
    assert f"Ranks of the answer tokens: [('{first}', {rank})]" in out
