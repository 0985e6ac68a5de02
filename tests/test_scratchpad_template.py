"""The scratchpad as the authors' released code built and scored it (issue 52, item 3).

Each expected text below was worked by hand from the authors' instance processors
(McGill-NLP/length-generalization, ``src/data/data_instance_processor/*_instance_processor.py``) under
``configs/data/minimal_template.jsonnet`` (markers ``in``/``comp``/``out``/``[ ]``/``re``, ``' # '``
between steps, ``stripped: true``), their bos ``Thinking step by step:`` and eos ``. Thus,``, and their
``create_scratchpad_str`` (double spaces dropped, as a word-level tokenizer drops them). Scoring follows
their ``extract_answer_from_prediction`` (``prediction.split(scratchpad_eos)[1]``, the whole prediction
without one) and each processor's ``extract_answer_from_final_output`` / ``is_answer_correct``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from probe.errors import ProbeError
from probe.runs.folders import given_options, task_folder_name
from probe.tasks import SCRATCHPAD_TASKS, Tokenizer, get
from probe.tasks.decoding import PLAIN_POSITIONS, SCRATCHPAD_POSITIONS, decode_positions, evaluate_examples

AUTHORS_FULL = [
    (
        ("addition", {}, (57, 68)),
        "Compute 5 7 + 6 8 ?",
        "Thinking step by step: in 7, 8 comp 7 + 8 + carry = 15 + 0 = 15 out 5 [ carry: 1 ] re 5 + 6 # "
        "in 5, 6 comp 5 + 6 + carry = 11 + 1 = 12 out 2 [ carry: 1 ] re + # "
        "in 0, 0 comp 0 + 0 + carry = 0 + 1 = 1 out 1 [ carry: 0 ] re + . Thus, The answer is 1 2 5.",
    ),
    (  # the shorter number is padded with zeros, and what remains of it read back as an int: "0 0" -> "0"
        ("addition", {}, (5, 968)),
        "Compute 5 + 9 6 8 ?",
        "Thinking step by step: in 5, 8 comp 5 + 8 + carry = 13 + 0 = 13 out 3 [ carry: 1 ] re 0 + 9 6 # "
        "in 0, 6 comp 0 + 6 + carry = 6 + 1 = 7 out 7 [ carry: 0 ] re 0 + 9 # "
        "in 0, 9 comp 0 + 9 + carry = 9 + 0 = 9 out 9 [ carry: 0 ] re + . Thus, The answer is 9 7 3.",
    ),
    (
        ("summation", {}, ([7, 6, 9],)),
        "Compute: 7 + 6 + 9 .",
        "Thinking step by step: in 7 comp 7 + sum = 7 + 0 = out 7 [ sum: 7 = 7 ] re 6 + 9 # "
        "in 6 comp 6 + sum = 6 + 7 = out 1 3 [ sum: 1 3 = 3 ] re 9 # "
        "in 9 comp 9 + sum = 9 + 3 = out 1 2 [ sum: 1 2 = 2 ] re . Thus, The answer is 2 .",
    ),
    (
        ("parity", {}, ([1, 0, 1],)),
        "Is the number of 1's even in the sequence [ 1, 0, 1 ] ?",
        "Thinking step by step: in 1 comp 1 ** par = 1 ** 0 out 1 [ par: 1 ] re [ 0, 1 ] # "
        "in 0 comp 0 ** par = 0 ** 1 out 1 [ par: 1 ] re [ 1 ] # "
        "in 1 comp 1 ** par = 1 ** 1 out 0 [ par: 0 ] re [ ] . Thus, The answer is Yes.",
    ),
    (
        ("polynomial", {}, (-2, [(-3, 3), (1, 0)])),
        "Evaluate at x = - 2 in - 3 * x ** 3 + 1 * x ** 0 ?",
        "Thinking step by step: in - 3 * x ** 3 comp - 3 * - 2 ** 3 = - 3 * - 8 out 2 4 [ sum: 0 + 2 4 = 4 ] "
        "re 1 * x ** 0 # in 1 * x ** 0 comp 1 * - 2 ** 0 = 1 * 1 out 1 [ sum: 4 + 1 = 5 ] re . Thus, "
        "The answer is 5.",
    ),
    (  # no V for sorting: "full" writes I, C, O and R
        ("sorting", {}, (list("3141"),)),
        "Sort the following list [ 3, 1, 4, 1 ].",
        "Thinking step by step: in 3 comp The minimum of the unsorted portion out 1 re [ 3, 4, 1 ] # "
        "in 3 comp The minimum of the unsorted portion out 1 re [ 4, 3 ] # "
        "in 4 comp The minimum of the unsorted portion out 3 re [ 4 ] # "
        "in 4 comp The minimum of the unsorted portion out 4 re [ ] . Thus, The sorted list is [ 1, 1, 3, 4 ].",
    ),
    (
        ("sorting", {"variant": "multi-digit"}, ([31, 5, 126],)),
        "Sort the following list [ 3 1, 5, 1 2 6 ].",
        "Thinking step by step: in 3 1 comp The minimum of the unsorted portion out 5 re [ 3 1, 1 2 6 ] # "
        "in 3 1 comp The minimum of the unsorted portion out 3 1 re [ 1 2 6 ] # "
        "in 1 2 6 comp The minimum of the unsorted portion out 1 2 6 re [ ] . Thus, "
        "The sorted list is [ 5, 3 1, 1 2 6 ].",
    ),
    (  # clauses in the order given; the literal's step has an empty computation
        ("lego", {}, (list("abcd"), [-1, 1, 1, -1], 2, [2, 0, 3, 1])),
        "If c = + b, a = -1, d = - c, b = - a. Then, what is the value of c?",
        "Thinking step by step: in a comp out -1 re c = + b, d = - c, b = - a # "
        "in b comp - a = - -1 out +1 re c = + b, d = - c # in c comp + b = + +1 out +1 re d = - c . Thus, "
        "The answer is +1.",
    ),
]


@pytest.mark.parametrize("case, source, target", AUTHORS_FULL, ids=lambda x: x[0] if isinstance(x, tuple) else None)
def test_authors_full_format_by_hand(case, source, target):
    name, options, args = case
    task = get(name, **options, scratchpad="full")
    assert task.template == "authors"  # the default with a scratchpad
    example = task.example_for(*args)
    assert (example.source, example.target) == (source, target)


def test_authors_computation_only_by_hand():
    example = get("addition", scratchpad="C").example_for(57, 68)
    assert example.target == (
        "Thinking step by step: comp 7 + 8 + carry = 15 + 0 = 15 # comp 5 + 6 + carry = 11 + 1 = 12 # "
        "comp 0 + 0 + carry = 0 + 1 = 1 . Thus, The answer is 1 2 5."
    )
    lego = get("lego", scratchpad="C").example_for(list("abcd"), [-1, 1, 1, -1], 2, [2, 0, 3, 1])
    assert lego.target == "Thinking step by step: comp # comp - a = - -1 # comp + b = + +1 . Thus, The answer is +1."
    assert get("sorting", scratchpad="empty").example_for(list("31")).target == (
        "Thinking step by step: # . Thus, The sorted list is [ 1, 3 ]."
    )


def test_figure_is_one_option_away_and_no_scratchpad_keeps_the_papers_text():
    figure = get("addition", scratchpad="full", template="figure").example_for(57, 68)
    assert figure.source == "Compute: 5 7 + 6 8 ?" and figure.target.startswith("<scratch> For digits 7 and 8,")
    plain = get("addition")
    assert plain.template == "figure" and plain.example_for(57, 68).target == "The answer is 1 2 5."
    assert plain.example_for(57, 68).source == "Compute: 5 7 + 6 8 ?"
    authors = get("addition", template="authors").example_for(57, 68)  # the authors' no-scratchpad runs
    assert (authors.source, authors.target) == ("Compute 5 7 + 6 8 ?", "The answer is 1 2 5.")


def test_run_names_show_a_template_only_when_it_is_not_the_default():
    assert given_options("addition", get("addition").options) == {}
    assert given_options("addition", get("addition", scratchpad="full").options) == {"scratchpad": "full"}
    figure = given_options("addition", get("addition", scratchpad="full", template="figure").options)
    assert task_folder_name("addition", figure) == "addition+scratchpad=full+template=figure"
    authors = given_options("parity", get("parity", template="authors").options)
    assert task_folder_name("parity", authors) == "parity+template=authors"


# --- scoring ------------------------------------------------------------------------------------


def right(task, prediction: str, example) -> bool:
    read = task.answer_of(prediction)
    return read is not None and read == task.answer_of(example.target)


def test_the_answer_after_the_first_end_marker_counts():
    task = get("addition", scratchpad="full")
    example = task.example_for(57, 68)
    assert right(task, example.target, example)
    assert right(task, "Thinking step by step: in 9, 9 comp 1 + 1 = 7 . Thus, The answer is 1 2 5.", example)
    assert not right(task, "Thinking step by step: . Thus, The answer is 1 2 4.", example)
    # a right answer after a SECOND end marker does not count: their split(eos)[1] stops at it
    assert not right(task, "Thinking step by step: . Thus, The answer is 9. . Thus, The answer is 1 2 5.", example)
    assert not right(task, "Thinking step by step: . Thus, in 7 . Thus, The answer is 1 2 5.", example)
    # no end marker: the whole prediction is read
    assert right(task, "The answer is 1 2 5.", example)
    assert right(task, "Thinking step by step: in 7, 8 The answer is 1 2 5.", example)
    figure = get("addition", scratchpad="full", template="figure")
    gold = figure.example_for(57, 68)
    assert right(figure, "<scratch> wrong ; </scratch> The answer is 1 2 5.", gold)
    assert not right(figure, "<scratch> ; </scratch> x </scratch> The answer is 1 2 5.", gold)


def test_numbers_are_compared_as_the_authors_ints():
    task = get("addition", scratchpad="full")
    example = task.example_for(5, 8)  # 13
    assert task.answer_of(example.target) == 13
    for said in ("0 1 3", "1 3 ", "013", "0 0 1 3"):  # their regex, spaces dropped, int(): leading zeros vanish
        assert right(task, f". Thus, The answer is {said}.", example), said
    for said in ("1 . 3", "- 1 3", "1 4", "1 3 5"):  # 1.3 is a float (their assert int fails): wrong
        assert not right(task, f". Thus, The answer is {said}.", example), said
    assert task.answer_of(". Thus, The answer is Yes.") is None and task.answer_of("") is None
    summation = get("summation", scratchpad="C")
    assert summation.answer_of(summation.example_for([7, 6, 9]).target) == 2


def test_words_and_lists_are_read_as_the_authors_read_them():
    parity = get("parity", scratchpad="full")
    gold = parity.example_for([1, 0, 1])
    assert right(parity, ". Thus, The answer is yes.", gold) and right(parity, ". Thus, The answer is YES .", gold)
    assert not right(parity, ". Thus, The answer is No.", gold)
    lego = get("lego", scratchpad="full")
    gold = lego.example_for(list("ab"), [-1, 1], 1, [0, 1])
    assert right(lego, ". Thus, The answer is +1.", gold) and not right(lego, ". Thus, The answer is + 1.", gold)
    single = get("sorting", scratchpad="full")
    gold = single.example_for(list("3141"))
    assert single.answer_of(gold.target) == ("1", "1", "3", "4")
    assert right(single, ". Thus, The sorted list is [ 1,1 , 3, 4 ]", gold)
    assert not right(single, ". Thus, The sorted list is [ 1, 3, 4 ].", gold)
    multi = get("sorting", scratchpad="full", variant="multi-digit")
    gold = multi.example_for([31, 5, 126])
    assert multi.answer_of(gold.target) == (5, 31, 126)
    assert right(multi, ". Thus, The sorted list is [ 5, 0 3 1, 1 2 6 ].", gold)
    figure = get("sorting", scratchpad="C", variant="multi-digit", template="figure")
    assert figure.answer_of(figure.example_for([31, 5, 126]).target) == (5, 31, 126)


@pytest.mark.parametrize("template", ["authors", "figure"])
@pytest.mark.parametrize("fmt", ["full", "C", "empty"])
@pytest.mark.parametrize("name", SCRATCHPAD_TASKS)
def test_every_gold_target_reads_as_its_answer(name, fmt, template):
    task = get(name, scratchpad=fmt, template=template)
    plain = get(name, template=template, train_length=8)  # the same instances without a scratchpad
    for seed in range(2):
        for example, bare in zip(task.examples("test", n=100, seed=seed), plain.examples("test", n=100, seed=seed)):
            assert example.source == bare.source
            read = task.answer_of(example.target)
            assert read is not None and read == task.answer_of(bare.target)


class Scripted(torch.nn.Module):
    """A stand-in model whose greedy decoding writes ``script`` (then <eos>) after any prompt."""

    def __init__(self, script: list[int], vocab: int) -> None:
        super().__init__()
        self.script, self.vocab, self.start = script, vocab, None
        self.cfg = SimpleNamespace(n_ctx=4096)
        self.config = SimpleNamespace(random_positions=False)

    def forward(self, tokens: torch.Tensor, positions=None) -> torch.Tensor:
        if self.start is None:
            self.start = tokens.size(1)
        step = tokens.size(1) - self.start
        logits = torch.zeros(tokens.size(0), tokens.size(1), self.vocab)  # [batch, pos, vocab]
        logits[:, -1, self.script[step] if step < len(self.script) else 2] = 1.0
        return logits


@pytest.mark.parametrize("template", ["authors", "figure"])
def test_decoding_scores_the_answer_read(template):
    task = get("addition", scratchpad="full", template=template)
    tokenizer = Tokenizer.for_task(task)
    example = task.example_for(5, 8)
    close = ". Thus," if template == "authors" else "</scratch>"
    cases = {
        example.target: True,
        example.target.replace("1 3.", "0 1 3."): True,  # read as the int 13 (one token too long: no <eos>)
        example.target.replace("carry: 1", "carry: 7"): True,  # a wrong scratchpad, the right answer
        example.target.replace("1 3.", "1 4."): False,
        f"{close} 5 {close} The answer is 1 3.": False,  # after a second end marker
    }
    for prediction, expected in cases.items():
        model = Scripted(tokenizer.encode(prediction) + [tokenizer.eos_id], len(tokenizer))
        result = evaluate_examples(model, tokenizer, [example], use_cache=False, answer_of=task.answer_reader())
        assert result.correct == [expected], prediction
    assert get("addition").answer_reader() is None  # no scratchpad: exact match of the whole target, as before


def test_a_run_in_the_authors_words_without_a_scratchpad_is_read_as_they_read_it():
    """Their runs without a scratchpad go through the same ``s2s_*`` processors, whose regex reads the last
    "The answer is ..." of the whole prediction: text after the answer, an answer given twice and a leading zero
    do not make it wrong, where a token-for-token match of the whole target would. A row with no end is decoded to
    their 256 positions, prompt included (``configs/trainer/base_model.jsonnet``), not a scratchpad's 1,500."""
    task = get("addition", template="authors", train_length=8)
    tokenizer = Tokenizer.for_task(task)
    example = task.example_for(5, 8)
    assert example.target == "The answer is 1 3."
    cases = {
        "The answer is 1 3.": True,
        "The answer is 1 3. 7": True,  # text after the answer
        "The answer is 0 1 3.": True,  # read as the int 13
        "The answer is 1 4. The answer is 1 3.": True,  # the last answer is read
        "The answer is 1 3. The answer is 1 4.": False,
        "The answer is 1 4.": False,
        "1 3": False,  # no answer to read
    }
    for prediction, expected in cases.items():
        model = Scripted(tokenizer.encode(prediction) + [tokenizer.eos_id], len(tokenizer))
        result = evaluate_examples(model, tokenizer, [example], use_cache=False, answer_of=task.answer_reader())
        assert result.correct == [expected], prediction
    assert decode_positions(task) == PLAIN_POSITIONS
    assert decode_positions(get("addition", scratchpad="full", train_length=8)) == SCRATCHPAD_POSITIONS
    assert decode_positions(get("addition", train_length=8)) is None  # probe's words: the whole target, as before
    endless = tokenizer.encode("The answer is 1 3." + " 7" * 300)  # never ends: decoded as far as the budget
    prompt = len(tokenizer.encode_prompt(example.source))
    result = evaluate_examples(
        Scripted(endless, len(tokenizer)),
        tokenizer,
        [example],
        use_cache=False,
        answer_of=task.answer_reader(),
        decode_to=PLAIN_POSITIONS,
        keep_predictions=True,
    )
    assert result.correct == [True]
    assert len(tokenizer.encode(result.predictions[0])) == PLAIN_POSITIONS - prompt


# --- vocabulary ---------------------------------------------------------------------------------

CONFIGS = [
    (name, options)
    for name in SCRATCHPAD_TASKS
    for options in ([{"variant": "single-token"}, {"variant": "multi-digit"}] if name == "sorting" else [{}])
]


@pytest.mark.parametrize("template", ["authors", "figure"])
@pytest.mark.parametrize("name, options", CONFIGS, ids=[f"{n}{o.get('variant', '')}" for n, o in CONFIGS])
def test_every_word_is_in_the_vocabulary(name, options, template):
    """Every example of three seeds at every length 1..16, in each format kind, tokenizes and reads back."""
    updates = template == "figure" or get(name, **options).AUTHORS_UPDATES
    for fmt in (None, "full", "C", "I+O+V+R" if updates else "I+O+R"):
        task = get(name, **options, scratchpad=fmt, template=template, train_length=8)
        tokenizer = Tokenizer.for_task(task)
        examples = [e for seed in range(3) for e in task.examples("test", n=150, seed=seed)]
        assert {e.length for e in examples} == set(range(1, 17))
        for example in examples:
            for text in (example.source, example.target):
                assert tokenizer.decode(tokenizer.encode(text)) == text


def test_a_longer_scratchpad_with_the_right_answer_scores_as_the_authors_decode_it():
    """The model repeats a step of the scratchpad and still ends on the right answer: past the gold's length +
    1, where decoding stops for a token-for-token score, it has no end marker yet; the authors decode on to
    1,500 positions and read the answer, so it is right. A runaway with no <eos> and a wrong answer stays wrong."""
    task = get("addition", scratchpad="full")
    tokenizer = Tokenizer.for_task(task)
    example = task.example_for(57, 68)
    scratch, answer = example.target.split(" . Thus,")
    longer = f"{scratch} {scratch.removeprefix('Thinking step by step: ')} . Thus,{answer}"
    cases = {longer: True, longer.replace("1 2 5.", "1 2 6."): False}
    for prediction, expected in cases.items():
        assert len(tokenizer.encode(prediction)) > len(tokenizer.encode(example.target)) + 1
        model = Scripted(tokenizer.encode(prediction) + [tokenizer.eos_id], len(tokenizer))
        result = evaluate_examples(model, tokenizer, [example], use_cache=False, answer_of=task.answer_reader())
        assert result.correct == [expected], prediction


def test_a_row_decoded_on_goes_on_from_where_it_stopped_each_token_generated_once():
    """The longer scratchpad above, unended at the gold's budget: decoding on reads its prompt and what it wrote
    in one pass and goes on from there, so the model is asked for each of its tokens once (decoding it again
    from the prompt asked for the first gold-length's worth twice)."""
    task = get("addition", scratchpad="full")
    tokenizer = Tokenizer.for_task(task)
    example = task.example_for(57, 68)
    scratch, answer = example.target.split(" . Thus,")
    longer = f"{scratch} {scratch.removeprefix('Thinking step by step: ')} . Thus,{answer}"
    script = tokenizer.encode(longer) + [tokenizer.eos_id]
    model = Scripted(script, len(tokenizer))
    calls = []
    model.register_forward_hook(lambda module, args, out: calls.append(args[0].size(1)))
    result = evaluate_examples(model, tokenizer, [example], use_cache=False, answer_of=task.answer_reader())
    assert result.correct == [True]
    assert len(calls) == len(script)  # one pass a token generated, each generated once
    prompt, gold = len(tokenizer.encode_prompt(example.source)), len(tokenizer.encode(example.target)) + 1
    assert calls[gold] == prompt + gold  # the second decoding's first pass: the prompt and the gold's budget


@pytest.mark.parametrize("task,options", [("sorting", {}), ("sorting", {"variant": "multi-digit"}), ("lego", {})])
def test_a_format_with_updates_is_refused_where_the_authors_processor_refuses_it(task, options):
    """Their sorting and LEGO processors raise on include_intermediate_variables; probe would otherwise write
    another format under the name (V alone is the empty format). ``full`` stays, as I+C+O+R."""
    for fmt in ("V", "I+C+O+V", "C+V"):
        with pytest.raises(ProbeError, match="refuses V"):
            get(task, scratchpad=fmt, **options)
    full, icor = get(task, scratchpad="full", **options), get(task, scratchpad="I+C+O+R", **options)
    assert [e.target for e in full.examples("valid", 5)] == [e.target for e in icor.examples("valid", 5)]
    assert get(task, scratchpad="V", template="figure", **options).scratchpad == "V"
