"""What the depth study's page says beyond the generic report (``studies/depth.yaml``'s
``sections``, each called with the study, its judged parts and the page's folder):
:func:`diagnostics` (two claims read from the gradient and stream norms by layer, and their
figure) and :func:`papers` (the papers' figures beside ours); the eval-gap section is
``gap.py``'s."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from normzoo.study.cells import number
from normzoo.verdicts.significance import INDICATED, MIN_SEEDS, NOT_SHOWN, SHOWN

PRE, POST = {"model.residual": "pre"}, {"model.residual": "post"}
ADMIN = {"model.residual": {"name": "admin", "init": "profiled"}}
DEEPNORM = {"model.residual": "deepnorm"}


def _runs(result: Any, setting: dict[str, Any]) -> list[Any]:
    return result.cells.finished(result.cells.settings.index(setting))


def _part(parts: list[Any], name: str) -> Any:
    return next(p for p in parts if p.name == name)


def _name(cell: Any) -> str:
    return f"{cell.folder.parent.name}/{cell.folder.name}"


def _layer(cell: Any, when: str, stack: str, column: str) -> list[float]:
    rows = sorted((r for r in cell.diagnose() if r["when"] == when and r["stack"] == stack),
                  key=lambda r: int(r["layer"]))
    return [number(r.get(column)) or 0.0 for r in rows]


def _ratio(values: list[float]) -> float | None:
    return values[-1] / values[0] if len(values) > 1 and values[0] > 0 else None


def _fmt(values: list[float | None]) -> str:
    return ", ".join("–" if v is None else f"{v:.2f}" for v in values)


def _word(met: list[bool], seeds: int, capped: list[str]) -> str:
    """A measurement's rule, met in ``met`` (one per seed and stack), as a verdict word."""
    if not any(met):
        return NOT_SHOWN
    word = SHOWN if seeds >= MIN_SEEDS and not capped else INDICATED
    return word if all(met) else f"{word} in part"


def _caps(cells: list[Any], seeds: int) -> list[str]:
    """The rule's caps on these cells (:func:`normzoo.verdicts.rule.caps`)."""
    from normzoo.verdicts.rule import Run, caps

    return caps([Run(_name(c), c.seed, 0.0, c.precision, c.device) for c in cells], [], seeds)


def _gradients(post: list[Any], pre: list[Any]) -> tuple[str, str, list[str]]:
    """At initialisation, the last layer's gradient norm over the first's."""
    text, met = [], []
    for stack in ("encoder", "decoder"):
        r_post, r_pre = ([_ratio(_layer(c, "init", stack, "grad_norm")) for c in cells]
                         for cells in (post, pre))
        text.append(f"{stack}: last/first layer gradient norm, Post-LN {_fmt(r_post)} vs "
                    f"Pre-LN {_fmt(r_pre)}")
        worst = min((r for r in r_post if r is not None), default=0.0)
        met += [r is not None and worst >= 2 and r <= worst / 2 for r in r_pre]
    capped = _caps(post + pre, min(len(post), len(pre)))
    return _word(met, min(len(post), len(pre)), capped), (
        f"18+18 at initialisation, seeds {', '.join(c.seed for c in post)} (Post-LN) and "
        f"{', '.join(c.seed for c in pre)} (Pre-LN): " + "; ".join(text)), capped


def _grows(branch: list[float | None], stream: list[float | None]) -> list[bool]:
    """Per seed: the stream at least 2x, the branch at most half as much."""
    return [s is not None and b is not None and s >= 2 and b <= s / 2
            for b, s in zip(branch, stream, strict=True)]


def _self_attention(cell: Any, stack: str) -> list[float]:
    """The self-attention branch's own norm by layer: its ratio times the norm of the stream
    entering it, the previous layer's output (so from layer 2 on)."""
    stream = _layer(cell, "final", stack, "stream_norm")
    return [r * s for r, s in zip(_layer(cell, "final", stack, "ratio_self_attn")[1:],
                                  stream[:-1], strict=True)]


def _stream(pre: list[Any]) -> tuple[str, str, list[str]]:
    """Pre-LN at the end, the stream's norm and the branches' own norms, last layer over
    first: self-attention in every cell, the feed-forward and cross-attention branches where
    the cell measured them (``branch_ffn``, ``branch_cross_attn``), on the seeds that have them."""
    text, met, measured = [], {"self": [], "ffn": [], "cross": []}, {"ffn": set(), "cross": set()}
    for stack in ("encoder", "decoder"):
        streams = [_ratio(_layer(c, "final", stack, "stream_norm")) for c in pre]
        attns = [_ratio(_self_attention(c, stack)) for c in pre]
        met["self"] += _grows(attns, streams)
        text.append(f"{stack}: stream norm last/first layer {_fmt(streams)}; self-attention "
                    f"branch norm last/second layer {_fmt(attns)}")
        for key, column, words in (("ffn", "branch_ffn", "feed-forward"),
                                   ("cross", "branch_cross_attn", "cross-attention")):
            found = [(_ratio(norms), g, c.seed) for c, g in zip(pre, streams, strict=True)
                     if any(norms := _layer(c, "final", stack, column))]
            if found:
                met[key] += _grows([b for b, _, _ in found], [g for _, g, _ in found])
                measured[key] |= {seed for *_, seed in found}
                text[-1] += f"; {words} branch norm last/first " + ", ".join(
                    f"{_fmt([b])} (seed {seed})" for b, _, seed in found)
    capped, words = _caps(pre, len(pre)), []
    for key, name in (("self", "self-attention"), ("ffn", "feed-forward"),
                      ("cross", "the decoder's cross-attention")):
        seeds = len(pre) if key == "self" else len(measured[key])
        word = _word(met[key], seeds, capped)
        words.append(f"{name} {word}" + (": it grows more than half as much as the stream"
                                         if word == NOT_SHOWN else "")
                     + (f" ({seeds} of {len(pre)} seeds measured it)" if seeds < len(pre) else ""))
    return "; ".join(words), (f"Pre-LN 18+18 at the end, seeds {', '.join(c.seed for c in pre)}: "
                              + "; ".join(text)), capped


TITLES = ("Post-LN's gradients grow toward the output at initialisation",
          "Pre-LN's stream grows with depth; its branches do not keep up")


def diagnostics(study: Any, parts: list[Any], out: Path) -> str:
    """The two claims, from the stability part's diagnosed cells of its own precision."""
    stability = _part(parts, "stability")
    post, pre = _runs(stability, POST), _runs(stability, PRE)
    lines = ["## Measurements by layer (18+18)", "", "Two claims read by the rules the "
             "introduction states (a measurement, no test set, no p-value):", ""]
    for title, (word, here, capped) in zip(TITLES, (_gradients(post, pre), _stream(pre)),
                                           strict=True):
        lines += [f"### {title}: **{word}**", "", f"- Here: {here}.",
                  *([f"- Capped: {'; '.join(capped)}."] if capped else []), ""]
    _figure(post, pre, out / "diagnostics-stability.png")
    return "\n".join([*lines, "![gradient norms by layer at initialisation; Pre-LN's stream and "
                      "branches at the end](diagnostics-stability.png)", ""])


def _figure(post: list[Any], pre: list[Any], path: Path) -> None:
    from matplotlib.figure import Figure

    from normzoo.io.atomic import save_figure

    figure = Figure(figsize=(11, 7.2), layout="constrained")
    axes = figure.subplots(2, 2)
    for j, stack in enumerate(("encoder", "decoder")):
        for k, cell in enumerate(post + pre):
            values = _layer(cell, "init", stack, "grad_norm")
            axes[0, j].plot(range(1, len(values) + 1), values, marker=".", color=f"C{k}",
                            label=f"{'Post-LN' if cell in post else 'Pre-LN'}, seed {cell.seed}")
        for k, cell in enumerate(pre):
            for values, style, what in (
                    (_layer(cell, "final", stack, "stream_norm"), "-o", "stream"),
                    ([0.0, *_self_attention(cell, stack)], "--x", "self-attention branch"),
                    (_layer(cell, "final", stack, "branch_cross_attn"), ":^",
                     "cross-attention branch")):
                if any(values):
                    axes[1, j].plot([i + 1 for i, v in enumerate(values) if v], [
                        v for v in values if v], style, ms=3, color=f"C{k}",
                        label=f"{what}, seed {cell.seed}")
        axes[0, j].set_title(f"{stack}: gradient norm by layer at initialisation", fontsize=9)
        axes[1, j].set_title(f"{stack}: Pre-LN at the end, mean L2 norm per token", fontsize=9)
    for ax in axes.flat:
        ax.set(yscale="log", xlabel="layer")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # no cells yet: an empty panel, no legend
            ax.legend(fontsize=6)
    save_figure(figure, path)


# -- the papers' figures beside ours ----------------------------------------------------------
PAPERS = [("6 layers", "Admin (Liu et al. 2020), WMT14 En-De", "27.80 | 27.27 | 27.90 | –"),
          ("6 layers", "Admin (Liu et al. 2020), IWSLT14 De-En", "35.64 | 35.50 | 35.67 | –"),
          ("18 layers", "Admin (Liu et al. 2020), WMT14 En-De", "diverged | 28.38 | 29.03 | –"),
          ("18 layers", "DeepNet (Wang et al. 2022)", "diverged | – | – | 28.8")]


def _mean(result: Any, setting: dict[str, Any]) -> str:
    values = [v for c in (_runs(result, setting) if setting in result.cells.settings else [])
              if (v := c.score(result.scores[0].score, result.task)) is not None]
    return "–" if not values else f"{values[0]:.2f} (1)" if len(values) == 1 else (
        f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f} ({len(values)})")


def papers(study: Any, parts: list[Any], out: Path) -> str:
    lines = ["## The papers' figures beside ours", "", "Absolute BLEU is not comparable across "
             "datasets and model sizes; the pattern within a row is. Ours: test BLEU, mean ± sd "
             "(seeds), bf16-mixed.", "",
             "| depth | source | Post-LN | Pre-LN | Admin (profiled) | DeepNorm |",
             "|---|---|---|---|---|---|", *(f"| {d} | {s} | {row} |" for d, s, row in PAPERS)]
    for depth, name, cap in (("6+6", "ceiling", "7,000"), ("18+18", "stability", "4,500")):
        result = _part(parts, name)
        lines.append(f"| {depth} | normzoo, Multi30k En-De test2016 (d_model 128, {cap}-update "
                     "cap) | " + " | ".join(_mean(result, s) for s in (POST, PRE, ADMIN,
                                                                       DEEPNORM)) + " |")
    return "\n".join([*lines, ""])


# -- the eval-gap investigation ---------------------------------------------------------------
