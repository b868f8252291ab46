"""What the preference link adds to rendering one message (issue 22.5): no database, no SMTP.

    .venv/bin/python bench/render_links.py                 # 20,000 messages, 5 rounds
    .venv/bin/python bench/render_links.py --messages 50000 --rounds 9

Renders one campaign's message (text body with `{{ preferences_url }}` and
`{{ unsubscribe_url }}`) for each of `--messages` recipients with the real CompiledMessage and
with one whose preference link is switched off (one HMAC less per message), alternating every
500 messages so both see the same machine, and prints µs per message and their ratio per
round, then the median ratio. Ratios
within one run only: on a shared machine the absolute figures move from run to run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from senddock.messages import CompiledMessage, Links, Recipient, compile_message

BODY = (
    "Hello {{ subscriber.name }}\n"
    + "A line of this month's news.\n" * 40
    + "Your lists: {{ preferences_url }}\nLeave: {{ unsubscribe_url }}\n"
)


class Unlinked(CompiledMessage):
    """The same message with no preference link: what rendering cost before issue 22.5."""

    def preferences(self, rcpt: Recipient) -> str:
        return ""


STRIDE = 500


def one_round(messages: list[CompiledMessage], recipients: list[Recipient]) -> list[float]:
    """µs per message of each of `messages`, rendered in turns of STRIDE recipients."""
    spent = [0.0] * len(messages)
    for start in range(0, len(recipients), STRIDE):
        batch = recipients[start : start + STRIDE]
        for i, message in enumerate(messages):
            began = time.perf_counter()
            for rcpt in batch:
                message.render(rcpt, "<sd.1.1.x@example.org>")
            spent[i] += time.perf_counter() - began
    return [t / len(recipients) * 1e6 for t in spent]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    links = Links("https://news.example.org", b"k" * 32, 7, "news@example.org")
    linked = compile_message(
        "Hi {{ subscriber.name }}", "News <news@example.org>", BODY, None, links=links
    )
    unlinked = Unlinked(**vars(linked))
    people = [Recipient(f"zoë{i}@bücher.example", f"Zoë {i}", {}, i) for i in range(args.messages)]
    print(f"{'round':>5} {'linked µs':>10} {'unlinked µs':>12} {'ratio':>6}")
    ratios = []
    for n in range(args.rounds):
        with_link, without = one_round([linked, unlinked], people)
        ratios.append(with_link / without)
        print(f"{n:>5} {with_link:>10.1f} {without:>12.1f} {ratios[-1]:>6.3f}")
    print(f"median ratio {statistics.median(ratios):.3f} over {args.rounds} rounds")


if __name__ == "__main__":
    main()
