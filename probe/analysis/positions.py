"""How each model represents position (`probe positions`): linear position probes per residual stream,
the relative-vs-absolute decomposition of every head's logits, attention sinks and the variance of
attention outputs against position (:mod:`probe.metrics.positions` holds the measures).

Inputs are :class:`PositionInput` s: a task run's gold examples, up to ``n_per_bucket`` per length
bucket, seen and unseen (``<bos> source <sep> target <eos>``; the landmark is ``<sep>``), or windows
of held-out code at 1x (seen) and 2x (unseen) the training context for a code run or an ``hf:`` model.
One forward pass per batch feeds every measure through hooks (``blocks.{l}.hook_resid_pre/post``,
``attn.hook_attn_scores``, ``attn.hook_pattern``, ``hook_attn_out``); only sufficient statistics and
the probes' rows are kept.

Probes read position 0-based (``<bos>`` at 0) from stream s: s = 0 the embedding (``blocks.0.hook_resid_pre``,
token and absolute position embeddings), s = l the residual after layer l (``blocks.{l-1}.hook_resid_post``,
the paper's 1-based layers). They are fitted on half the seen length buckets (every other one; by
example where there is one seen bucket, as for code windows) and scored on the other half (held-out
seen lengths) and on the unseen lengths; on the unseen ones also separately on the positions beyond
the largest one fitted, where rounding a regression is exact only if it extrapolates.

Heads are decomposed on the raw logits (``seen``, ``unseen``) and within query rows (``seen_rows``,
``unseen_rows``: what softmax sees; :func:`probe.metrics.positions.decompose_logits`); a head's kind
is read from the raw logits of the seen lengths. Sinks and variance are per layer, heads averaged.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from probe.analysis.runs import Progress, RunInfo
from probe.errors import ProbeError
from probe.metrics.bootstrap import bootstrap_ci
from probe.metrics.positions import (
    LogitSums,
    MomentSums,
    bootstrap_probe_scores,
    decompose_logits,
    fit_ridge,
    head_kind,
    log_slope,
    logit_sums,
    moment_sums,
    position_variance,
    probe_statistics,
    sink_share,
)

SINK_FIRST = (1, 4)  # the first k tokens whose attention share is reported
SHARES = ("relative", "absolute", "both", "position", "content")


@dataclass(frozen=True)
class PositionInput:
    """One sequence to read: its tokens, whether its length was seen in training, its group (length
    bucket or context size) and its landmark (index of ``<sep>``; None where there is none)."""

    tokens: Tensor  # [pos] long
    seen: bool
    group: int
    landmark: int | None = None


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
            "kinds": {k: kinds.count(k) for k in ("relative", "absolute", "content")},
            "best_probe": best,
        }

    def probe_rows(self) -> list[dict[str, Any]]:
        return [{"run": self.info.label, "pe": self.info.pe, **row} for row in self.probes]


def _nanmean(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else float("nan")


def _hook_names(model) -> tuple[list[str], list[str], list[str], list[str]]:
    """(streams, logits, patterns, attention outputs): TransformerLens' hook names, checked to exist."""
    L = model.cfg.n_layers
    streams = ["blocks.0.hook_resid_pre", *(f"blocks.{layer}.hook_resid_post" for layer in range(L))]
    scores = [f"blocks.{layer}.attn.hook_attn_scores" for layer in range(L)]
    patterns = [f"blocks.{layer}.attn.hook_pattern" for layer in range(L)]
    outputs = [f"blocks.{layer}.hook_attn_out" for layer in range(L)]
    missing = [n for n in (*streams, *scores, *patterns, *outputs) if n not in model.hook_dict]
    if missing:
        raise ProbeError(
            f"the model has no hook {missing[0]}: its positions cannot be read by TransformerLens' hook names"
        )
    return streams, scores, patterns, outputs


def _batches(
    inputs: Sequence[PositionInput], batch_size: int, per_square_token: int, max_bytes: int
) -> Iterator[list[int]]:
    """Indices of consecutive inputs: at most ``batch_size``, and a padded batch's [batch, head, T, T] maps
    (``per_square_token`` bytes per query-key pair of one example) within ``max_bytes`` (one input at least)."""
    start = 0
    while start < len(inputs):
        stop, width = start + 1, len(inputs[start].tokens)
        while stop < len(inputs) and stop - start < batch_size:
            wider = max(width, len(inputs[stop].tokens))
            if (stop - start + 1) * wider * wider * per_square_token > max_bytes:
                break
            width, stop = wider, stop + 1
        yield list(range(start, stop))
        start = stop


def probe_positions(length: int, most: int) -> Tensor:
    """[kept] the positions of a sequence of ``length`` whose streams the probes read: all of them,
    or ``most`` evenly spaced ones (first and last included) for longer sequences."""
    if length <= most:
        return torch.arange(length)
    return torch.linspace(0, length - 1, most).round().long().unique()


@dataclass
class _Collected:
    """What the hooks keep, per layer: statistics only, and the probes' rows."""

    rows: list[list[Tensor]]  # [stream][batch]: [kept, d_model]
    example: list[Tensor]  # [batch]: [kept] index of the input
    position: list[Tensor]  # [batch]: [kept]
    logits: list[dict[bool, LogitSums]]  # [layer]: seen -> sums [head, T, T]
    sinks: dict[int, list[list[Tensor]]]  # first k -> [layer][batch]: [examples, head]
    uniform: dict[int, list[Tensor]]  # first k -> [batch]: [examples]
    moments: list[MomentSums | None]  # [layer]: [pos, d_model]

    def logit_sums(self, seen: bool) -> LogitSums | None:
        """All layers' sums for seen (or unseen) inputs, stacked: sums [layer, head, T, T]."""
        parts = [layer.get(seen) for layer in self.logits]
        if any(p is None for p in parts):
            return None
        return LogitSums(
            torch.stack([p.sums for p in parts]),
            torch.stack([p.squares for p in parts]),
            torch.stack([p.row_sums for p in parts]),
            torch.stack([p.row_squares for p in parts]),
            parts[0].counts,
        )

    def moment_sums(self) -> MomentSums:
        """All layers' moments stacked: sums [layer, pos, d_model]."""
        return MomentSums(
            self.moments[0].count,
            torch.stack([m.sums for m in self.moments]),
            torch.stack([m.squares for m in self.moments]),
        )


HEAD_CHUNK = 8  # heads whose float64 logits are centred and summed at once


def _head_chunks(scores: Tensor, lengths: Tensor) -> LogitSums:
    """:func:`logit_sums` of [batch, head, query, key] logits, ``HEAD_CHUNK`` heads at a time."""
    parts = [logit_sums(scores[:, h : h + HEAD_CHUNK], lengths) for h in range(0, scores.shape[1], HEAD_CHUNK)]
    return LogitSums(
        torch.cat([p.sums for p in parts]),
        torch.cat([p.squares for p in parts]),
        torch.cat([p.row_sums for p in parts]),
        torch.cat([p.row_squares for p in parts]),
        parts[0].counts,
    )


@torch.inference_mode()
def _collect(
    model,
    inputs: Sequence[PositionInput],
    *,
    pad_id: int,
    batch_size: int,
    max_probe_positions: int,
    device: torch.device,
    sink_first: Sequence[int],
    max_bytes: int = 2**30,
) -> _Collected:
    """One forward pass per batch; each layer's hooks fold its logits, patterns and outputs into statistics
    at once, so at most one layer's maps are alive. Hooks are bound to the names asked for (a bridge's
    hook may carry its canonical name instead)."""
    streams, scores, patterns, outputs = _hook_names(model)
    L = model.cfg.n_layers
    out = _Collected(
        [[] for _ in streams],
        [],
        [],
        [{} for _ in range(L)],
        {k: [[] for _ in range(L)] for k in sink_first},
        {k: [] for k in sink_first},
        [None] * L,
    )
    model.eval()
    batch: dict[str, Any] = {}  # the current batch's rows, positions, lengths and seen masks

    def on_stream(stream: int):
        def hook(value: Tensor, hook) -> None:  # [batch, pos, d_model] -> [kept, d_model]
            out.rows[stream].append(value[batch["rows"], batch["positions"]].cpu())

        return hook

    def on_scores(layer: int):
        def hook(value: Tensor, hook) -> None:  # [batch, head, query, key]
            for flag, chosen in batch["seen"].items():
                part = _head_chunks(value[chosen], batch["lengths"][chosen])
                kept = out.logits[layer].get(flag)
                out.logits[layer][flag] = part if kept is None else kept + part

        return hook

    def on_pattern(layer: int):
        def hook(value: Tensor, hook) -> None:  # [batch, head, query, key]
            for k in sink_first:
                share, uniform = sink_share(value, batch["lengths"], k)  # [batch, head], [batch]
                out.sinks[k][layer].append(share.cpu())
                if layer == 0:
                    out.uniform[k].append(uniform.cpu())

        return hook

    def on_output(layer: int):
        def hook(value: Tensor, hook) -> None:  # [batch, pos, d_model]
            moments = moment_sums(value, batch["lengths"])
            out.moments[layer] = moments if out.moments[layer] is None else out.moments[layer] + moments

        return hook

    hooks = [
        *((n, on_stream(s)) for s, n in enumerate(streams)),
        *((n, on_scores(layer)) for layer, n in enumerate(scores)),
        *((n, on_pattern(layer)) for layer, n in enumerate(patterns)),
        *((n, on_output(layer)) for layer, n in enumerate(outputs)),
    ]
    per_square_token = model.cfg.n_heads * (4 + 4) + HEAD_CHUNK * 8 * 3  # float32 logits, pattern; float64 chunk
    for indices in _batches(inputs, batch_size, per_square_token, max_bytes):
        chosen = [inputs[i] for i in indices]
        lengths = torch.tensor([len(x.tokens) for x in chosen])
        tokens = torch.full((len(chosen), int(lengths.max())), pad_id, dtype=torch.long)
        for row, x in enumerate(chosen):
            tokens[row, : len(x.tokens)] = x.tokens
        kept = [probe_positions(len(x.tokens), max_probe_positions) for x in chosen]
        rows = torch.cat([torch.full_like(k, row) for row, k in enumerate(kept)])
        positions = torch.cat(kept)
        out.example.append(torch.tensor(indices)[rows])
        out.position.append(positions)
        seen = torch.tensor([x.seen for x in chosen], device=device)
        batch.update(
            rows=rows.to(device),
            positions=positions.to(device),
            lengths=lengths.to(device),
            seen={flag: seen == flag for flag in (True, False) if (seen == flag).any()},
        )
        model.run_with_hooks(tokens.to(device), return_type=None, fwd_hooks=hooks)
    return out


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
    model,
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
) -> PositionResult:
    """Every position measure of ``model`` on ``inputs`` (module docstring)."""
    import time

    if not inputs:
        raise ProbeError("no inputs to read")
    too_long = [len(x.tokens) for x in inputs if len(x.tokens) > model.cfg.n_ctx]
    if too_long:
        raise ProbeError(
            f"{len(too_long)} input(s) have up to {max(too_long)} tokens, more than this model's context "
            f"(n_ctx={model.cfg.n_ctx})"
        )
    device = torch.device(device)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    got = _collect(
        model,
        inputs,
        pad_id=pad_id,
        batch_size=batch_size,
        max_probe_positions=max_probe_positions,
        device=device,
        sink_first=sink_first,
    )
    timings["collect"] = time.perf_counter() - start
    start = time.perf_counter()
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
    timings["probes"] = time.perf_counter() - start

    start = time.perf_counter()
    decomposition, kinds = {}, []
    for flag, name in ((True, "seen"), (False, "unseen")):
        stats = got.logit_sums(flag)
        if stats is not None:
            shares = decompose_logits(stats)  # each [layer, head]
            decomposition[name] = {k: v.cpu().tolist() for k, v in shares.items()}
            rows = decompose_logits(stats, within_rows=True)
            decomposition[f"{name}_rows"] = {k: v.cpu().tolist() for k, v in rows.items()}
            if flag:
                kinds = head_kind({k: v.cpu() for k, v in shares.items()})
    seen = torch.tensor([x.seen for x in inputs])
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
                        "layer": layer + 1,
                        "share": ci.mean[layer].item(),
                        "share_low": ci.low[layer].item(),
                        "share_high": ci.high[layer].item(),
                        "uniform": uniform[chosen].mean().item(),
                        "heads": share[chosen][:, layer].mean(0).tolist(),
                    }
                )
    moments = got.moment_sums()
    variance = position_variance(moments)  # [layer, pos]
    t = torch.arange(1, variance.shape[-1] + 1)
    slopes = log_slope(t, variance)
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
        {
            "position": t.tolist(),
            "layers": variance.cpu().tolist(),
            "slope": slopes.cpu().tolist(),
            "count": moments.count.cpu().tolist(),
        },
        skipped,
        timings,
    )


# -- inputs of runs and hf: models ----------------------------------------------------------------------
def task_inputs(
    config: Mapping[str, Any], n_ctx: int, n_per_bucket: int = 10, seed: int = 0
) -> tuple[list[PositionInput], int, int]:
    """A task run's gold examples of every length bucket, seen and unseen: (inputs, pad id, skipped)."""
    from probe.analysis.examples import fitting_examples, sample_buckets, task_of

    task, tokenizer = task_of(config)
    buckets, skipped = fitting_examples(sample_buckets(task, n_per_bucket, seed, "all"), tokenizer, n_ctx)
    inputs = []
    for bucket in buckets:
        for example in bucket.examples:
            ids, target_start = tokenizer.encode_example(example)
            inputs.append(PositionInput(torch.tensor(ids), bucket.seen, bucket.length, target_start - 1))
    return inputs, tokenizer.pad_id, skipped


def window_inputs(windows) -> list[PositionInput]:
    """Code windows (:class:`probe.analysis.windows.ContextWindows`, one per context size) as inputs."""
    return [PositionInput(row, w.seen, w.context) for w in windows for row in w.tokens]


def positions_report(
    names: Sequence[str | Path],
    *,
    n_per_bucket: int = 10,
    seed: int = 0,
    alpha: float = 1e-3,
    n_resamples: int = 1000,
    batch_size: int = 32,
    max_probe_positions: int = 256,
    device: str | torch.device = "cpu",
    options: Mapping[str, Any] | None = None,
    multiples: Sequence[float] | None = None,
    progress: Progress | None = None,
) -> list[PositionResult]:
    """:func:`analyse_positions` on each of ``names``: task runs (their length buckets), code runs (windows
    of their held-out corpus at 1x and 2x their context) and ``hf:`` models (held-out code of the
    corpus ``options`` name, as `probe distances` reads them)."""
    from probe.analysis.external import (
        _readable,
        heldout_texts,
        load_subject,
        reference_context,
        resolve_models,
        tokenized,
    )
    from probe.analysis.runs import is_code_run, load_run_model
    from probe.analysis.windows import choose_windows, fitting_windows, run_windows
    from probe.models.external import is_external

    device = torch.device(device)
    settings = dict(
        alpha=alpha,
        n_resamples=n_resamples,
        seed=seed,
        batch_size=batch_size,
        max_probe_positions=max_probe_positions,
        device=device,
    )
    names = [str(n) for n in names]
    results = []
    if any(is_external(n) for n in names):
        names = resolve_models(names)
        texts = heldout_texts(names, options)
        for done, name in enumerate(names):
            subject = load_subject(name, device)
            if progress:
                progress(subject.info.label, done, len(names))
            context = reference_context(texts, options, subject)
            windows = choose_windows(
                tokenized(subject, texts),
                context,
                multiples=multiples,
                n_per_bucket=n_per_bucket,
                seed=seed,
                bos=subject.bos_id,
            )
            kept, skipped = _readable(windows, [subject])
            results.append(
                analyse_positions(subject.model, window_inputs(kept), subject.info, skipped=skipped, **settings)
            )
            del subject
        return results
    for done, name in enumerate(names):
        model, info = load_run_model(Path(name), device)
        if progress:
            progress(info.label, done, len(names))
        if is_code_run(model.metadata):
            windows = run_windows(name, model.metadata, multiples=multiples, n_per_bucket=n_per_bucket, seed=seed)
            kept, skipped = fitting_windows(windows, model.cfg.n_ctx, info.label)
            results.append(analyse_positions(model, window_inputs(kept), info, skipped=skipped, **settings))
        else:
            inputs, pad_id, skipped = task_inputs(model.metadata, model.cfg.n_ctx, n_per_bucket, seed)
            results.append(analyse_positions(model, inputs, info, pad_id=pad_id, skipped=skipped, **settings))
        del model
    return results


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
                        "layer": layer + 1,
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
