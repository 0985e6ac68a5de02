"""How each model represents position (`probe positions`): linear position probes per residual stream,
the relative-vs-absolute decomposition of every head's logits, attention sinks and the variance of
attention outputs against position (:mod:`probe.metrics.position_stats` holds the measures).

Inputs are :class:`PositionInput` s: a task run's gold examples, up to ``n_per_bucket`` per length
bucket, seen and unseen, in the run's own sequence format (``<bos> source <sep> target <eos>``, or
the authors' without ``<bos>``; the landmark is ``<sep>``), or windows of held-out code at 1x (seen)
and 2x (unseen) the training context for a code run or an ``hf:`` model. One forward pass per batch
feeds every measure through hooks (:mod:`probe.analysis.position_hooks`: ``blocks.{l}.hook_resid_pre/post``,
``attn.hook_attn_scores``, ``attn.hook_pattern``, ``hook_attn_out``); only sufficient statistics and
the probes' rows are kept.

Probes read position 0-based (the first token at 0) from stream s: s = 0 the embedding (``blocks.0.hook_resid_pre``,
token and absolute position embeddings), s > 0 the residual after layer s - 1 (``blocks.{s-1}.hook_resid_post``;
layers from 0, as everywhere in probe). They are fitted on half the seen length buckets (every other one; by
example where there is one seen bucket, as for code windows) and scored on the other half (held-out
seen lengths) and on the unseen lengths; on the unseen ones also separately on the positions beyond
the largest one fitted, where rounding a regression is exact only if it extrapolates.

Heads are decomposed on the raw logits (``seen``, ``unseen``) and within query rows (``seen_rows``,
``unseen_rows``: what softmax sees; :func:`probe.metrics.position_stats.decompose_logits`); a head's kind
is read from the raw logits of the seen lengths. Sinks and variance are per layer, heads averaged.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from probe.analysis.position_hooks import collect
from probe.errors import ProbeError
from probe.metrics.bootstrap import bootstrap_ci
from probe.metrics.position_stats import (
    bootstrap_probe_scores,
    fit_ridge,
    head_kind,
    log_slope,
    position_variance,
    probe_statistics,
)
from probe.subjects.inputs import PositionInput
from probe.subjects.memory import keep_freed_memory
from probe.subjects.run_info import Progress, RunInfo, within
from probe.subjects.settings import ReadSettings

if TYPE_CHECKING:
    from transformer_lens.model_protocol import TransformerLensModel

SINK_FIRST = (1, 4)  # the first k tokens whose attention share is reported
SHARES = ("relative", "absolute", "both", "position", "content")
BATCH_SIZE = 32  # inputs per batch unless the settings say


@dataclass
class PositionResult:
    """Everything measured on one model; ``to_json`` is what `probe positions` writes."""

    info: RunInfo
    n_layers: int
    n_heads: int
    n_inputs: dict[str, int]  # seen, unseen
    probes: list[dict[str, Any]]  # one row per (target, stream, set): r2, mae, accuracy with intervals
    decomposition: dict[
        str, dict[str, list[list[float]]]
    ]  # seen, unseen, seen_rows, unseen_rows -> share -> [layer][head]
    kinds: list[list[str]]  # [layer][head] on the seen lengths
    sinks: list[dict[str, Any]]  # one row per (lengths, first k, layer): share with interval, uniform
    variance: dict[str, Any]  # per layer: variance at each position, log-log slope
    skipped: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    entropy: dict[str, Any] = field(default_factory=dict)  # seen, unseen -> per layer and head; growth [layer][head]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.info.to_json(),
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_inputs": self.n_inputs,
            "skipped": self.skipped,
            "probes": self.probes,
            "decomposition": self.decomposition,
            "kinds": self.kinds,
            "sinks": self.sinks,
            "variance": self.variance,
            "entropy": self.entropy,
            "summary": self.summary(),
        }

    def summary(self) -> dict[str, Any]:
        """Per model: head shares averaged over all heads (seen lengths), how many heads of each kind,
        the first-token share of the last layer, and the best position probe per set."""
        shares = {
            view: {
                name: _nanmean([v for layer in self.decomposition.get(view, {}).get(name, []) for v in layer])
                for name in SHARES
            }
            for view in ("seen", "seen_rows")
        }
        kinds = [k for layer in self.kinds for k in layer]
        best = {}
        for rows in (r for r in self.probes if r["target"] == "position" and r["set"] in ("heldout", "unseen")):
            if rows["set"] not in best or rows["r2"] > best[rows["set"]]["r2"]:
                best[rows["set"]] = {"stream": rows["stream"], "r2": rows["r2"], "accuracy": rows["accuracy"]}
        return {
            "shares": shares["seen"],
            "shares_within_rows": shares["seen_rows"],
            "kinds": {k: kinds.count(k) for k in ("relative", "absolute", "content", "constant")},
            "best_probe": best,
            "entropy": {name: self.entropy[name]["mean"] for name in ("seen", "unseen") if name in self.entropy},
        }

    def probe_rows(self) -> list[dict[str, Any]]:
        return [{"run": self.info.label, "pe": self.info.pe, **row} for row in self.probes]


def _nanmean(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else float("nan")


def _split(inputs: Sequence[PositionInput]) -> Tensor:
    """[input] 0: fit the probe, 1: held-out seen, 2: unseen. Every other seen group is held out; with
    one seen group, every other seen input."""
    groups = sorted({x.group for x in inputs if x.seen})
    if not groups:
        raise ProbeError("no input of a seen length to fit the position probes on")
    held = set(groups[1::2])
    where = []
    seen_count = 0
    for x in inputs:
        if not x.seen:
            where.append(2)
            continue
        if len(groups) > 1:
            where.append(1 if x.group in held else 0)
        else:
            where.append(seen_count % 2)
            seen_count += 1
    return torch.tensor(where)


def _probe_rows(
    features: list[Tensor],
    targets: Tensor,
    example: Tensor,
    split: Tensor,
    valid: Tensor,
    *,
    target_name: str,
    alpha: float,
    n_resamples: int,
    seed: int,
) -> list[dict[str, Any]]:
    """Fit on split 0 and score on held-out seen, unseen and beyond-the-fitted positions, per stream."""
    row_split = split[example]
    fit = valid & (row_split == 0)
    if not fit.any():
        return []
    largest = targets[fit].max()
    masks = {
        "fit": fit,
        "heldout": valid & (row_split == 1),
        "unseen": valid & (row_split == 2),
        "beyond": valid & (row_split == 2) & (targets > largest),
    }
    rows = []
    for stream, x in enumerate(features):
        ridge = fit_ridge(x[fit], targets[fit], alpha)
        predicted = ridge.predict(x)  # [rows]
        for name, mask in masks.items():
            if not mask.any():
                continue
            used = example[mask].unique(return_inverse=True)[1]
            per_example = probe_statistics(predicted[mask], targets[mask], used, int(used.max()) + 1)
            scores = bootstrap_probe_scores(per_example, n_resamples=n_resamples, seed=seed)
            row = {
                "target": target_name,
                "stream": stream,
                "set": name,
                "n_examples": per_example.shape[0],
                "n_positions": int(mask.sum()),
            }
            for score, (value, low, high) in scores.items():
                row.update({score: value, f"{score}_low": low, f"{score}_high": high})
            rows.append(row)
    return rows


def analyse_positions(
    model: TransformerLensModel,
    inputs: Sequence[PositionInput],
    info: RunInfo,
    *,
    pad_id: int = 0,
    batch_size: int = 32,
    max_probe_positions: int = 256,
    alpha: float = 1e-3,
    n_resamples: int = 1000,
    seed: int = 0,
    sink_first: Sequence[int] = SINK_FIRST,
    device: str | torch.device = "cpu",
    skipped: int = 0,
    progress: Progress | None = None,
    max_length: float | None = None,
) -> PositionResult:
    """Every position measure of ``model`` on ``inputs`` (module docstring). An input longer than
    ``max_length`` (default the model's n_ctx; ``math.inf`` for a model that reads any length, Rotary or ALiBi
    from Hugging Face) raises ProbeError."""
    _check_lengths(model, inputs, max_length)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    got = collect(
        model,
        inputs,
        pad_id=pad_id,
        batch_size=batch_size,
        max_probe_positions=max_probe_positions,
        device=torch.device(device),
        sink_first=sink_first,
        progress=progress,
    )
    timings["collect"] = time.perf_counter() - start
    start = time.perf_counter()
    probes = _position_probes(got, inputs, alpha=alpha, n_resamples=n_resamples, seed=seed)
    timings["probes"] = time.perf_counter() - start

    start = time.perf_counter()
    decomposition, kinds = _decomposition(got)
    seen = torch.tensor([x.seen for x in inputs])
    sinks = _sinks(got, seen, sink_first, n_resamples, seed)
    entropy = _entropy(got, seen, n_resamples, seed)
    variance = _variance(got)
    timings["attention"] = time.perf_counter() - start
    return PositionResult(
        info,
        model.cfg.n_layers,
        model.cfg.n_heads,
        {"seen": int(seen.sum()), "unseen": int((~seen).sum())},
        probes,
        decomposition,
        kinds,
        sinks,
        variance,
        skipped,
        timings,
        entropy,
    )


def _check_lengths(model, inputs: Sequence[PositionInput], max_length: float | None) -> None:
    """Refuse no inputs, or an input longer than the model reads (``max_length``, default its n_ctx),
    before any forward pass."""
    if not inputs:
        raise ProbeError("no inputs to read")
    limit = model.cfg.n_ctx if max_length is None else max_length
    too_long = [len(x.tokens) for x in inputs if len(x.tokens) > limit]
    if too_long:
        raise ProbeError(
            f"{len(too_long)} input(s) have up to {max(too_long)} tokens, more than this model's context "
            f"(n_ctx={model.cfg.n_ctx})"
        )


def _position_probes(
    got, inputs: Sequence[PositionInput], *, alpha: float, n_resamples: int, seed: int
) -> list[dict[str, Any]]:
    """The probes' rows for the absolute position of every read row and, where inputs have a landmark,
    for the distance from it (rows at or after the landmark)."""
    example, position = torch.cat(got.example), torch.cat(got.position)
    features = [torch.cat(rows) for rows in got.rows]
    split = _split(inputs)
    every = torch.ones_like(position, dtype=torch.bool)
    probes = _probe_rows(
        features,
        position.double(),
        example,
        split,
        every,
        target_name="position",
        alpha=alpha,
        n_resamples=n_resamples,
        seed=seed,
    )
    landmark = torch.tensor([-1 if x.landmark is None else x.landmark for x in inputs])[example]
    after = (landmark >= 0) & (position >= landmark)
    if after.any():
        probes += _probe_rows(
            features,
            (position - landmark).double(),
            example,
            split,
            after,
            target_name="landmark_distance",
            alpha=alpha,
            n_resamples=n_resamples,
            seed=seed,
        )
    return probes


def _decomposition(got) -> tuple[dict[str, dict[str, list[list[float]]]], list[list[str]]]:
    """Every head's logit shares at the seen and unseen lengths (raw and within rows), and each
    head's kind read from the seen lengths' raw logits."""
    decomposition, kinds = {}, []
    for flag, name in ((True, "seen"), (False, "unseen")):
        shares = got.decomposition(name)  # each [layer, head]
        if shares is not None:
            decomposition[name] = {k: v.tolist() for k, v in shares.items()}
            decomposition[f"{name}_rows"] = {k: v.tolist() for k, v in got.decomposition(f"{name}_rows").items()}
            if flag:
                kinds = head_kind(shares)
    return decomposition, kinds


def _sinks(got, seen: Tensor, sink_first: Sequence[int], n_resamples: int, seed: int) -> list[dict[str, Any]]:
    """One row per (lengths, first k tokens, layer): the attention share on the first k tokens,
    heads averaged, with a bootstrap interval over inputs, and uniform attention's share beside it."""
    sinks = []
    for k in sink_first:
        share = torch.stack([torch.cat(layer) for layer in got.sinks[k]], 1)  # [input, layer, head]
        uniform = torch.cat(got.uniform[k])  # [input]
        for flag, name in ((True, "seen"), (False, "unseen")):
            chosen = seen == flag
            if not chosen.any():
                continue
            layer_share = share[chosen].mean(-1)  # [input, layer]: mean over heads
            ci = bootstrap_ci(layer_share, n_resamples=n_resamples, seed=seed)
            for layer in range(layer_share.shape[1]):
                sinks.append(
                    {
                        "lengths": name,
                        "first": k,
                        "layer": layer,  # blocks.{layer}: TransformerLens' numbering
                        "share": ci.mean[layer].item(),
                        "share_low": ci.low[layer].item(),
                        "share_high": ci.high[layer].item(),
                        "uniform": uniform[chosen].mean().item(),
                        "heads": share[chosen][:, layer].mean(0).tolist(),
                    }
                )
    return sinks


def _variance(got) -> dict[str, Any]:
    """The variance of attention outputs at each position per layer, and its log-log slope against
    position."""
    moments = got.moment_sums()
    variance = position_variance(moments)  # [layer, pos]
    t = torch.arange(1, variance.shape[-1] + 1)
    slopes = log_slope(t, variance)
    return {
        "position": t.tolist(),
        "layers": variance.cpu().tolist(),
        "slope": slopes.cpu().tolist(),
        "count": moments.count.cpu().tolist(),
    }


def _entropy(got, seen: Tensor, n_resamples: int, seed: int) -> dict[str, Any]:
    """Mean attention-row entropy per layer and head, at the seen and at the unseen lengths, with a bootstrap
    interval over inputs per layer (heads averaged), uniform attention's beside it; and per head how much it
    grows from seen to unseen lengths (distraction)."""
    entropy = torch.stack([torch.cat(layer) for layer in got.entropy], 1)  # [input, layer, head]
    uniform = torch.cat(got.uniform_entropy)  # [input]
    found: dict[str, Any] = {}
    for flag, name in ((True, "seen"), (False, "unseen")):
        chosen = seen == flag
        if not chosen.any():
            continue
        heads = entropy[chosen].mean(0)  # [layer, head]
        ci = bootstrap_ci(entropy[chosen].mean(-1), n_resamples=n_resamples, seed=seed)  # per layer
        found[name] = {
            "heads": heads.tolist(),
            "layers": ci.mean.tolist(),
            "low": ci.low.tolist(),
            "high": ci.high.tolist(),
            "uniform": float(uniform[chosen].mean()),
            "mean": float(heads.mean()),
        }
    if "seen" in found and "unseen" in found:
        found["growth"] = (torch.tensor(found["unseen"]["heads"]) - torch.tensor(found["seen"]["heads"])).tolist()
    return found


def positions_report(
    names: Sequence[str | Path],
    settings: ReadSettings | None = None,
    *,
    alpha: float = 1e-3,
    n_resamples: int = 1000,
    max_probe_positions: int = 256,
    root: str | Path = "checkpoints",
) -> PositionsReport:
    """:func:`analyse_positions` on each subject of ``names`` (:mod:`probe.subjects.resolve`): task runs read
    their length buckets, seen and unseen; code runs windows of their held-out corpus at 1x and 2x their
    context (or ``settings.multiples``); ``hf:`` models held-out code of the corpus ``settings.options`` name, as
    `probe distances` reads them. ``settings`` (:class:`~probe.subjects.settings.ReadSettings`; ``batch_size``
    default 32): ``dtype`` (``bfloat16``), the models' weights and forward passes in that precision;
    ``intervention``, every model read under it; every length is read, so ``lengths`` is not, nor are
    ``pe_options``."""
    from probe.subjects.resolve import file_stem, home, readings, resolve_all

    settings = ReadSettings() if settings is None else settings
    settings.refuse("probe positions", "lengths", "pe_options")
    keep_freed_memory(trim=2**27)  # its logit statistics stay long: keep less beside them
    read = dict(
        alpha=alpha,
        n_resamples=n_resamples,
        seed=settings.seed,
        batch_size=settings.batch_size or BATCH_SIZE,
        max_probe_positions=max_probe_positions,
        device=settings.device,
    )
    subjects = resolve_all(list(names), intervention=settings.intervention)
    results, context = [], None
    for done, (subject, reading) in enumerate(zip(subjects, readings(subjects, settings.options))):
        loaded = subject.load(settings.device, dtype=settings.dtype)
        inputs = settings.inputs(reading, loaded, [loaded], "all")
        context = inputs.task_options.get("context", context)
        padding = {} if inputs.pad_id is None else {"pad_id": inputs.pad_id}
        results.append(
            analyse_positions(
                loaded.model,
                inputs.position_inputs(),
                loaded.info,
                skipped=inputs.skipped,
                progress=within(settings.progress, loaded.info.label, done, len(subjects)),
                max_length=math.inf if loaded.max_length is None else loaded.max_length,
                **padding,
                **read,
            )
        )
        del loaded
    written = dict(
        n_per_bucket=settings.n_per_bucket,
        seed=settings.seed,
        alpha=alpha,
        resamples=n_resamples,
        max_positions=max_probe_positions,
    )
    folder = home(subjects, root, settings.options)
    return PositionsReport(results, written, folder, file_stem(subjects), context)


@dataclass
class PositionsReport:
    """`probe positions` on several subjects, and where outputs about them belong."""

    results: list[PositionResult]
    settings: dict[str, Any]  # n_per_bucket, seed, alpha, resamples, max_positions
    folder: Path  # beside the runs (probe.subjects.resolve.home)
    stem: str = ""  # the hf: models among the subjects, for output names
    context: int | None = None  # T, the context code models were read at; None for task runs

    name = "positions"  # its outputs' folder (probe.analysis.report.Report)

    def to_json(self) -> dict[str, Any]:
        return {"settings": self.settings, "models": [r.to_json() for r in self.results]}

    def to_rows(self) -> list[dict[str, Any]]:
        return positions_rows(self.results)

    def write(self, out_dir: str | Path) -> list[str]:
        """JSON and CSV (per head; the probes apart) and the five figures under ``out_dir``, as `probe
        positions` writes them (``positions[_<hf models>]_*``); returns the paths written."""
        from probe.analysis.report import write_tables
        from probe.atomic import write_csv
        from probe.figures import write_figure
        from probe.figures.positions import (
            entropy_figure,
            head_share_figure,
            probe_figure,
            sink_figure,
            variance_figure,
        )

        out_dir = Path(out_dir)
        stem = "positions" + (f"_{self.stem}" if self.stem else "")
        files = [str(p) for p in write_tables(self, out_dir, stem)]
        probes = [row for r in self.results for row in r.probe_rows()]
        files.append(str(write_csv(out_dir / f"{stem}_probes.csv", probes)))
        models = [r.to_json() for r in self.results]
        for suffix, figure in (
            ("probes", probe_figure(models)),
            ("landmark", probe_figure(models, "landmark_distance")),
            ("heads", head_share_figure(models)),
            ("sinks", sink_figure(models)),
            ("entropy", entropy_figure(models)),
            ("variance", variance_figure(models)),
        ):
            files += [str(p) for p in write_figure(figure, out_dir / f"{stem}_{suffix}")]
        return files


def positions_rows(results: Sequence[PositionResult]) -> list[dict[str, Any]]:
    """One CSV row per (run, layer, head): the decomposition shares on seen lengths and the head's kind."""
    rows = []
    for r in results:
        seen, rows_seen = r.decomposition.get("seen", {}), r.decomposition.get("seen_rows", {})
        for layer in range(r.n_layers):
            for head in range(r.n_heads):
                rows.append(
                    {
                        "run": r.info.label,
                        "pe": r.info.pe,
                        "layer": layer,  # blocks.{layer}: TransformerLens' numbering
                        "head": head,
                        **{name: seen[name][layer][head] if seen else None for name in SHARES},
                        **{
                            f"{name}_within_rows": rows_seen[name][layer][head] if rows_seen else None
                            for name in SHARES
                        },
                        "kind": r.kinds[layer][head] if r.kinds else None,
                    }
                )
    return rows
