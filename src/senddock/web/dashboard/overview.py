"""The campaign list's overview (issue 39, item 3): the audience's last 30 days as a chart, and
what needs a person now: what is sending, what waits for a decision, how the workers are.

Read in one snapshot per visit; each day series through a BRIN index on its time (0035).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from senddock.campaigns import unconfirmed
from senddock.campaigns.workers import live_workers
from senddock.db import sql
from senddock.web.dashboard.chart import HEIGHT, WIDTH, nice_max
from senddock.web.dashboard.views import Conn, env

QUERIES = sql.load(__package__, "overview.sql")
DAYS = 30
SERIES = (("joined", "joined"), ("left", "left"), ("bounced", "bounced or complained"))
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 12, 24


@dataclass(frozen=True)
class Day:
    day: datetime
    joined: int
    left: int
    bounced: int


@dataclass(frozen=True)
class Overview:
    subscribers: int
    suppressed: int
    sending: int  # campaigns sending now
    paused: int
    days: tuple[Day, ...]
    unconfirmed: int
    workers: int
    deaths: int  # worker processes found dead in the last day

    def total(self, series: str) -> int:
        return sum(getattr(d, series) for d in self.days)


def overview(conn: Conn, lease: float) -> Overview:
    with conn.transaction():
        head = conn.execute(QUERIES["totals"]).fetchone()
        assert head is not None
        since: datetime = head["since"]
        per = {
            name: {r["day"]: int(r["n"]) for r in conn.execute(QUERIES[name], {"since": since})}
            for name, _ in SERIES
        }
        deaths = conn.execute(QUERIES["worker_deaths"]).fetchone()
        workers = live_workers(conn, lease)
    days = []
    for i in range(DAYS):
        day = since + timedelta(days=i)
        days.append(Day(day, *(per[name].get(day, 0) for name, _ in SERIES)))
    return Overview(
        subscribers=int(head["subscribers"]),
        suppressed=int(head["suppressed"]),
        sending=int(head["sending"]),
        paused=int(head["paused"]),
        days=tuple(days),
        unconfirmed=unconfirmed.total(conn),
        workers=workers,
        deaths=int(deaths["n"]) if deaths else 0,
    )


def audience_svg(o: Overview) -> str:
    """The last 30 days as grouped bars: joined, left, bounced or complained, a day each."""
    top = nice_max(max((max(d.joined, d.left, d.bounced) for d in o.days), default=0) or 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / DAYS
    bar = slot * 0.8 / len(SERIES)
    bars = [
        {
            "series": name,
            "x": round(LEFT + i * slot + slot * 0.1 + k * bar, 1),
            "w": round(bar, 1),
            "h": round(plot_h * n / top, 1),
            "y": round(TOP + plot_h - plot_h * n / top, 1),
            "n": n,
            "label": f"{d.day:%Y-%m-%d}: {n} {said}",
        }
        for i, d in enumerate(o.days)
        for k, (name, said) in enumerate(SERIES)
        if (n := getattr(d, name))
    ]
    return env.get_template("audience.svg").render(
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        top=TOP,
        plot_w=plot_w,
        plot_h=plot_h,
        ymax=top,
        bars=bars,
        first=f"{o.days[0].day:%b %d}",
        last=f"{o.days[-1].day:%b %d}",
        totals=[(said, o.total(name)) for name, said in SERIES],
    )
