"""Sent per minute as an inline SVG bar chart, drawn on the server (no chart library)."""

from __future__ import annotations

from datetime import datetime

from senddock.web.dashboard.views import env

WIDTH, HEIGHT = 800, 200
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 12, 24  # room for the axis labels


def nice_max(peak: int) -> int:
    """The y axis top: the peak rounded up to 1, 2 or 5 times a power of ten."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if peak <= m * step:
                return m * step
        step *= 10


def sent_per_minute_svg(series: list[tuple[datetime, int]]) -> str:
    """The chart's markup; an empty series gives a chart that says nothing was sent yet."""
    top = nice_max(max((n for _, n in series), default=0) or 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(series), 1)
    bars = [
        {
            "x": round(LEFT + i * slot + slot * 0.1, 1),
            "w": round(slot * 0.8, 1),
            "h": round(plot_h * n / top, 1),
            "y": round(TOP + plot_h - plot_h * n / top, 1),
            "n": n,
            "label": minute.strftime("%H:%M"),
        }
        for i, (minute, n) in enumerate(series)
    ]
    total = sum(n for _, n in series)
    return env.get_template("chart.svg").render(
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        top=TOP,
        plot_w=plot_w,
        plot_h=plot_h,
        ymax=top,
        bars=bars,
        first=bars[0]["label"] if bars else "",
        last=bars[-1]["label"] if bars else "",
        total=total,
    )
