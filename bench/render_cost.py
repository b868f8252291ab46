"""What a layout and a Markdown body cost a message (issue 22), in one run.

    .venv/bin/python bench/render_cost.py                 # 20,000 messages a case, 5 rounds
    .venv/bin/python bench/render_cost.py --messages 5000 --rounds 3

Three campaigns with the same ~1.5 KB of body, compiled once as the worker compiles a
broadcast (campaigns/compose.py `message_bodies`, then `compile_message`), each rendered to
message bytes for distinct recipients (`CompiledMessage.render`, what a sender calls per job):
 (a) the plain HTML body, no layout;
 (b) the same HTML body inside a layout (a header, `{{ content }}`, a footer with the
     unsubscribe link);
 (c) the same text in Markdown inside that layout;
 (d) the message of (b) written by hand as one HTML body, no layout: what (b) costs beyond
     it is what the layout mechanism itself costs a message.
Printed: µs a message (the best round, as timeit reports: on a shared machine the slower
rounds measure the neighbours; the median too), each case's best against (a)'s and (d)'s.
No database, no SMTP: only the render, which is what a layout could make grow. The layout
adds its own bytes to every message, so (b) and (c) are a little dearer for that alone;
compile time is once per broadcast and is printed apart.
"""

from __future__ import annotations

import argparse
import statistics
import time

from senddock.campaigns.compose import message_bodies
from senddock.messages import Links, Recipient, compile_message
from senddock.messages.layout import splice

PARAGRAPH = (
    "Dear {{ subscriber.name }}, this week the shop has new books in every room: novels,"
    " poetry, the history of the river and the bridges over it, and a table of maps. "
)
HTML_BODY = "".join(f"<p>{PARAGRAPH}</p>\n" for _ in range(8))
MARKDOWN_BODY = "".join(f"{PARAGRAPH}\n\n" for _ in range(8))
LAYOUT = (
    '<html><body><header><img src="https://example.org/logo.png" alt="Bücherpost">'
    "<h1>Bücherpost</h1></header>\n{{ content }}\n"
    '<footer><p>You get this as {{ subscriber.email }}. <a href="{{ unsubscribe_url }}">'
    "Unsubscribe</a></p></footer></body></html>\n"
)


def row(html: str | None, markdown: str | None, layout: str | None) -> dict[str, object]:
    return {
        "text_body": None,
        "html_body": html,
        "markdown_body": markdown,
        "layout_html": layout,
        "layout_text": None,
    }


CASES = {
    "html, no layout": row(HTML_BODY, None, None),
    "html + layout": row(HTML_BODY, None, LAYOUT),
    "markdown + layout": row(None, MARKDOWN_BODY, LAYOUT),
    "(b) pasted by hand": row(splice(LAYOUT, HTML_BODY), None, None),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    links = Links(base_url="https://news.example.org", key=b"k" * 32, campaign_id=1, mailto="")
    people = [
        Recipient(f"zoë.{i}@bücher.example", f"Zoë {i}", {}, subscriber_id=i + 1)
        for i in range(args.messages)
    ]
    compiled, compile_us = {}, {}
    for name, r in CASES.items():
        started = time.perf_counter()
        text, html = message_bodies(r)
        compiled[name] = compile_message(
            "News for {{ subscriber.name }}", "Shop <news@example.org>", text, html, links=links
        )
        compile_us[name] = (time.perf_counter() - started) * 1e6
    per: dict[str, list[float]] = {name: [] for name in CASES}
    names = list(compiled)
    for round_no in range(
        args.rounds
    ):  # interleaved and rotated: drift on a shared machine hits all
        for name in names[round_no % len(names) :] + names[: round_no % len(names)]:
            message = compiled[name]
            started = time.perf_counter()
            for p in people:
                message.render(p, "<m@example.org>")
            per[name].append((time.perf_counter() - started) * 1e6 / len(people))
    base = min(per["html, no layout"])
    pasted = min(per["(b) pasted by hand"])
    print(f"{args.messages:,} messages a case, best and median of {args.rounds} rounds")
    print(
        f"{'case':<20} {'best µs':>8} {'median':>7} {'/ (a)':>7} {'/ (d)':>7} {'bytes':>7}"
        f" {'compile µs':>11}"
    )
    for name, message in compiled.items():
        us, median = min(per[name]), statistics.median(per[name])
        size = len(message.render(people[0], "<m@example.org>"))
        print(
            f"{name:<20} {us:>8.1f} {median:>7.1f} {us / base:>7.2f} {us / pasted:>7.2f}"
            f" {size:>7} {compile_us[name]:>11.0f}"
        )


if __name__ == "__main__":
    main()
