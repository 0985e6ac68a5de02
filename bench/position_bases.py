"""The pseudo-inverses `probe positions` computes per set of inputs: the additive fit f(i − j) + g(j) through
the Schur complement (two T x T pseudo-inverses and a product) against the one 2T x 2T pseudo-inverse of its
whole Gram matrix that it replaced, side by side, with the explained sums of squares compared.

    python bench/position_bases.py                      # T = 512, 1024, 2048 (2,048: a 1,024-context model at 2x)

Writes bench/results/position_bases_cpu.json: per width, the seconds of each way (process CPU time, the
variants interleaved, one thread), their ratio, and the largest relative difference of rᵀG⁺r on random sums.
"""

from __future__ import annotations

import argparse
import os

import torch
from common import header, interleave, paired_ratio, write_json

from probe.metrics.position_stats import LogitBases, _explained, logit_bases


def _whole(counts: torch.Tensor, bases: LogitBases) -> tuple[torch.Tensor, torch.Tensor]:
    """The replaced way: G and G⁺ of the whole [[A, B], [Bᵀ, D]] (2T x 2T), rebuilt from the cells' counts."""
    T = bases.width
    cross = torch.zeros(T, T, dtype=torch.float64)
    cross.index_put_((bases.distance, bases.key), counts, accumulate=True)
    n_distance, n_key = cross.sum(1), cross.sum(0)
    shared = torch.zeros(T, T, dtype=torch.float64)
    if bases.within_rows:
        i = torch.arange(T)
        tail = (counts[bases.distance == 0] / (i + 1.0)).flip(0).cumsum(0).flip(0)
        shared = tail[torch.maximum(i[:, None], i[None, :])]
    gram_d, gram_k = torch.diag(n_distance) - shared, torch.diag(n_key) - shared
    gram = torch.cat([torch.cat([gram_d, cross - shared], 1), torch.cat([cross.T - shared, gram_k], 1)])
    return gram, torch.linalg.pinv(gram, rtol=1e-10, hermitian=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()
    rows = []
    for T in args.widths:
        rows_of, cols_of = torch.tril_indices(T, T)
        counts = torch.randint(1, 9, (len(rows_of),), generator=torch.Generator().manual_seed(T)).double()
        bases = logit_bases(counts, within_rows=True)
        runs = interleave(
            {
                "schur": lambda c=counts: logit_bases(c, within_rows=True),
                "whole": lambda c=counts, b=bases: _whole(c, b),
            },
            repeats=args.repeats, calls=1, warmup=0, device=torch.device("cpu"),
        )  # fmt: skip
        gram, inverse = _whole(counts, bases)
        sums = torch.randn(4, 2 * T, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        sums = sums @ (inverse @ gram)  # projected into G's range, where every Xᵀx lies
        new = bases.explained_both(sums[:, :T], sums[:, T:])
        old = _explained(inverse, sums)
        rows.append(
            {
                "width": T,
                "seconds": {name: sorted(r) for name, r in runs["cpu"].items()},
                "schur_over_whole": paired_ratio(runs["cpu"], "schur", "whole"),
                "max_relative_difference": float(((new - old).abs() / old.abs()).max()),
            }
        )
        print(T, rows[-1]["schur_over_whole"]["median"], rows[-1]["max_relative_difference"], flush=True)
    what = "logit_bases (Schur complement) against the 2T x 2T pseudo-inverse it replaced, within rows, 1 thread"
    write_json("position_bases", "cpu", {**header("position_bases", what, "cpu", load), "widths": rows})


if __name__ == "__main__":
    main()
