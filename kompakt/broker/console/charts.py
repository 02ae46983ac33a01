"""Server-rendered SVG line charts (no JavaScript library, no CDN): the partition
page's size and dirty-ratio history with a mark at each clean."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

W, H = 560, 170
PAD_L, PAD_R, PAD_T, PAD_B = 64, 12, 12, 26


def line_chart(
    points: Sequence[tuple[int, float]],
    *,
    label: str,
    fmt: Callable[[float], str],
    marks: Sequence[tuple[int, str]] = (),
    y_min: float | None = None,
    y_max: float | None = None,
    css: str = "series",
) -> str:
    """An SVG of ``points`` (ms, value) with vertical ``marks`` (ms, title) at cleans."""
    title = escape(label)
    if not points:
        return (
            f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{title}">'
            f'<text x="{W // 2}" y="{H // 2}" text-anchor="middle" class="empty">'
            f"no samples yet</text></svg>"
        )
    xs = [p[0] for p in points] + [m[0] for m in marks]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    lo = min(ys) if y_min is None else y_min
    hi = max(ys) if y_max is None else y_max
    if hi <= lo:
        hi = lo + 1
    if x1 <= x0:
        x1 = x0 + 1

    def sx(ms: float) -> float:
        return PAD_L + (ms - x0) / (x1 - x0) * (W - PAD_L - PAD_R)

    def sy(v: float) -> float:
        return H - PAD_B - (v - lo) / (hi - lo) * (H - PAD_T - PAD_B)

    out = [f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{title}">']
    out.append(f"<title>{title}</title>")
    for v in (lo, (lo + hi) / 2, hi):
        y = sy(v)
        out.append(
            f'<line class="grid" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="axis" x="{PAD_L - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(fmt(v))}</text>"
        )
    for ms, what in marks:
        x = sx(ms)
        out.append(
            f'<line class="clean-mark" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" '
            f'y2="{H - PAD_B}"><title>{escape(what)}</title></line>'
        )
    path = " ".join(f"{sx(ms):.1f},{sy(v):.1f}" for ms, v in points)
    out.append(f'<polyline class="{css}" points="{path}"/>')
    for ms, v in points[-64:]:
        out.append(f'<circle class="{css}-pt" cx="{sx(ms):.1f}" cy="{sy(v):.1f}" r="2"/>')
    out.append(
        f'<text class="axis" x="{PAD_L}" y="{H - 6}">{escape(_clock(x0))}</text>'
        f'<text class="axis" x="{W - PAD_R}" y="{H - 6}" text-anchor="end">'
        f"{escape(_clock(x1))}</text></svg>"
    )
    return "".join(out)


def _clock(ms: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%H:%M:%S")
