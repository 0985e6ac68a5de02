"""Parity (Table tab:dataset-examples, Appendix D.1; Anil et al., 2022): is the number of 1s even?

Bits ~ U{0, 1}; λ is the number of bits. The table's ``[ 1 0 0 1 1]`` is written ``[ 1 0 0 1 1 ]``;
``template=authors`` writes the authors' ``s2s_parity`` text (``... even in the sequence [ 1, 0 ] ?``).
"""

from __future__ import annotations

import random
from collections.abc import Hashable

from probe.tasks.answers import read_word
from probe.tasks.base import Example, ScratchpadTask
from probe.tasks.scratchpad import Step


def bracketed(bits: list[int]) -> str:
    return " ".join(["[", *map(str, bits), "]"])


def listed(bits: list[int]) -> str:
    """The authors' list: ``[ 1, 0, 1 ]`` (``[ ]`` when empty)."""
    return " ".join(f"[ {', '.join(map(str, bits))} ]".split())


class Parity(ScratchpadTask):
    name = "parity"
    summary = "whether a bit string has an even number of 1s"
    length_unit = "bits"

    def sample(self, rng: random.Random, length: int) -> Example:
        return self.example_for([rng.randint(0, 1) for _ in range(length)])

    def example_for(self, bits: list[int]) -> Example:
        written = f"the sequence {listed(bits)}" if self.authors_text else bracketed(bits)
        source = f"Is the number of 1's even in {written} ?"
        answer = f"The answer is {'No' if sum(bits) % 2 else 'Yes'}."
        build = authors_steps if self.authors_text else steps
        return Example(source, self.target(lambda: build(bits), answer), len(bits))

    def read_answer(self, final: str) -> Hashable | None:
        return read_word(final)

    def alphabet(self) -> list[str]:
        if self.authors_text:
            return ["Is the number of 1's even in the sequence [ 0, 1, ] ? The answer is Yes. No."]
        return ["Is the number of 1's even in [ 0 1 ] ? The answer is Yes. No."]

    def scratchpad_alphabet(self) -> list[str]:
        if self.authors_text:
            return ["0 1 ** par par: = [ 0, 1, ]"]
        template = "For bit 0, We have ( + parity ) % 2 = 2 Which is equal to . We update parity to 0."
        return [template, "So, the remaining input is [ ]"]


def steps(bits: list[int]) -> list[Step]:
    """Adds one bit per step to a running parity kept modulo 2."""
    parity, out = 0, []
    for i, bit in enumerate(bits):
        new = (bit + parity) % 2
        out.append(
            Step(
                f"For bit {bit},",
                f"We have ( {bit} + parity ) % 2 = ( {bit} + {parity} ) % 2 = {bit + parity} % 2",
                f"Which is equal to {new} .",
                f"We update parity to {new}.",
                f"So, the remaining input is {bracketed(bits[i + 1 :])}",
            )
        )
        parity = new
    return out


def authors_steps(bits: list[int]) -> list[Step]:
    """The authors' running parity: ``1 ** par = 1 ** 0`` (their ``**`` for XOR), the new parity as O and V."""
    parity, out = 0, []
    for i, bit in enumerate(bits):
        new = bit ^ parity
        out.append(Step(str(bit), f"{bit} ** par = {bit} ** {parity}", str(new), f"par: {new}", listed(bits[i + 1 :])))
        parity = new
    return out
