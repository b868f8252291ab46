"""Why one recipient failed, and what that means for the address: pure rules, no I/O.

Every finding gets a **reason** (the taxonomy of Sisimai's "Bounce Reason List", learnt from,
not copied); its **kind** follows from the reason by one table, `KIND`:

| kind        | reasons                                              | effect                |
|-------------|------------------------------------------------------|-----------------------|
| `hard`      | userunknown, hostunknown, hasmoved, notaccept: the   | suppress (`bounce`)   |
|             | address or its domain does not take mail             |                       |
| `soft`      | mailboxfull, suspend, expired, systemfull,           | counted; N in a       |
|             | systemerror, networkerror, mailererror, undefined    | window suppress it    |
| `policy`    | about us or our message, not the recipient: blocked, | nobody suppressed;    |
|             | spamdetected, policyviolation, rejected (the sender),| counted on the        |
|             | norelaying, securityerror, authfailure, requireptr,  | campaign              |
|             | badreputation, toomanyconn, speeding, mesgtoobig, …  |                       |
| `complaint` | feedback (an abuse, fraud or opt-out report)         | suppress (`complaint`)|
| `none`      | vacation, delivered                                  | nothing               |

A reason is read twice, from the RFC 3463 enhanced status code (its subject and detail:
`5.1.1` a bad mailbox, `5.2.2` a full one, `5.7.x` security or policy …) and from the words
of the reply, which the MTAs agree on more than their codes (`Recipient address rejected:
User unknown`, `Client host rejected: cannot find your reverse hostname`, …); the words name
the reason more precisely, but the verdict is conservative: a hard reason stands only when
neither reading contradicts it with a reason that is not hard, and a temporary failure (4xx,
`4.x.x`) is never hard. A permanent failure that nothing names is `undefined`, soft: a later
bounce costs a subscriber for good, so when in doubt it is counted, not suppressed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["hard", "soft", "policy", "complaint", "none"]
Reason = Literal[
    "userunknown", "hostunknown", "hasmoved", "notaccept",
    "mailboxfull", "suspend", "expired", "systemfull", "systemerror", "networkerror",
    "mailererror", "undefined",
    "blocked", "spamdetected", "virusdetected", "policyviolation", "rejected", "norelaying",
    "securityerror", "authfailure", "requireptr", "badreputation", "toomanyconn", "speeding",
    "mesgtoobig", "exceedlimit", "contenterror", "notcompliantrfc", "syntaxerror", "filtered",
    "feedback",
    "vacation", "delivered",
]  # fmt: skip

# The one table: a reason's kind.
KIND: dict[Reason, Kind] = {
    **dict.fromkeys(("userunknown", "hostunknown", "hasmoved", "notaccept"), "hard"),
    **dict.fromkeys(
        (
            "mailboxfull",
            "suspend",
            "expired",
            "systemfull",
            "systemerror",
            "networkerror",
            "mailererror",
            "undefined",
        ),
        "soft",
    ),
    **dict.fromkeys(
        (
            "blocked",
            "spamdetected",
            "virusdetected",
            "policyviolation",
            "rejected",
            "norelaying",
            "securityerror",
            "authfailure",
            "requireptr",
            "badreputation",
            "toomanyconn",
            "speeding",
            "mesgtoobig",
            "exceedlimit",
            "contenterror",
            "notcompliantrfc",
            "syntaxerror",
            "filtered",
        ),
        "policy",
    ),
    "feedback": "complaint",
    "vacation": "none",
    "delivered": "none",
}

# A reason for a finding whose source (a provider's event) gave its kind but no words that
# name a reason of that kind.
FALLBACK: dict[Kind, Reason] = {
    "hard": "userunknown",
    "soft": "undefined",
    "policy": "blocked",
    "complaint": "feedback",
    "none": "delivered",
}


@dataclass(frozen=True)
class Verdict:
    """A failed recipient's reason, and the kind the table gives it."""

    reason: Reason
    kind: Kind


# RFC 3463 subject.detail → reason (the class, 4 or 5, is judged apart).
STATUS_REASONS: dict[str, Reason] = {
    "1.1": "userunknown",  # bad destination mailbox address
    "1.2": "hostunknown",  # bad destination system address
    "1.3": "userunknown",  # bad destination mailbox address syntax
    "1.4": "undefined",  # destination mailbox address ambiguous
    "1.6": "hasmoved",  # destination mailbox has moved, no forwarding address
    "1.7": "rejected",  # bad sender's mailbox address syntax
    "1.8": "rejected",  # bad sender's system address
    "1.10": "userunknown",  # Exchange's RecipientNotFound; RFC 7505's null MX (words tell)
    "2.1": "suspend",  # mailbox disabled, not accepting messages
    "2.2": "mailboxfull",
    "2.3": "mesgtoobig",  # message length exceeds administrative limit
    "2.4": "systemerror",  # mailing list expansion problem
    "3.1": "systemfull",
    "3.2": "notaccept",  # system not accepting network messages
    "3.3": "systemerror",
    "3.4": "mesgtoobig",
    "3.5": "systemerror",
    "4.1": "networkerror",  # no answer from host
    "4.2": "networkerror",  # bad connection
    "4.3": "networkerror",  # directory server failure
    "4.4": "hostunknown",  # unable to route
    "4.5": "systemerror",  # mail system congestion
    "4.6": "networkerror",  # routing loop
    "4.7": "expired",
    "5.1": "syntaxerror",
    "5.2": "syntaxerror",
    "5.3": "exceedlimit",  # too many recipients
    "5.4": "syntaxerror",
    "5.6": "notcompliantrfc",  # SMTPUTF8 required
    "6.1": "contenterror",
    "6.2": "contenterror",
    "6.3": "contenterror",
    "6.4": "contenterror",
    "6.5": "contenterror",
    "6.6": "contenterror",
    "6.7": "contenterror",
    "6.8": "contenterror",
    "6.9": "contenterror",
    "6.10": "contenterror",
    "7.1": "policyviolation",  # delivery not authorized, message refused
    "7.2": "policyviolation",
    "7.3": "securityerror",
    "7.4": "securityerror",
    "7.5": "securityerror",
    "7.6": "securityerror",
    "7.7": "securityerror",
    "7.8": "securityerror",
    "7.9": "securityerror",
    "7.10": "securityerror",
    "7.11": "securityerror",
    "7.12": "securityerror",
    "7.13": "suspend",  # user account disabled (RFC 3463 registry)
    "7.14": "securityerror",
    "7.15": "securityerror",
    "7.16": "securityerror",
    "7.17": "securityerror",
    "7.18": "securityerror",
    "7.19": "securityerror",
    "7.20": "authfailure",  # no passing DKIM signature
    "7.21": "authfailure",
    "7.22": "authfailure",
    "7.23": "authfailure",  # SPF validation failed
    "7.24": "authfailure",
    "7.25": "requireptr",  # reverse DNS validation failed
    "7.26": "authfailure",  # multiple authentication checks failed
    "7.27": "rejected",  # sender address has null MX
    "7.28": "speeding",  # mail flood detected
    "7.29": "authfailure",  # ARC validation failure
    "7.30": "securityerror",  # REQUIRETLS support required
}

# The words of the replies, most specific first: the first that matches names the reason.
# Everything about the sender or its host comes before anything about the recipient, so
# "Sender address rejected: Domain not found" is about us, not a dead domain.
_WORDS: tuple[tuple[Reason, str], ...] = (
    # A name server that did not answer (Postfix's "Host not found, try again"): not a verdict.
    (
        "networkerror",
        r"not found, try again|temporary failure in name resolution"
        r"|(dns|name ?server) (timeout|timed out|servfail|failure)",
    ),
    (
        "rejected",
        r"sender (address |domain )?(is )?(rejected|denied|refused|unknown|invalid"
        r"|verify failed|not allowed|blocked)|(sender|envelope[- ]from|mail from|return"
        r"[- ]path)\b[^.;]{0,40}(rejected|denied|refused|not (allowed|permitted|valid"
        r"|exist))|(invalid|bad|unknown|unverifiable) (sender|from address|envelope"
        r" sender)|domain of sender|sender domain|sender verify|sender address has"
        r" null mx|verification of sender|your (sending )?domain",
    ),
    (
        "norelaying",
        r"relay(ing)? (access )?(denied|not (permitted|allowed))|unable to relay"
        r"|not permitted to relay|(we|i) do not relay|relay not permitted"
        r"|not (a )?(gateway|local domain)|no relaying|relaying (is )?denied"
        r"|relaying (is )?prohibited|open relay",
    ),
    (
        "requireptr",
        r"reverse (dns|lookup|hostname|address|mapping)|\bptr\b|\brdns\b"
        r"|cannot find your hostname|no (dns|host) ?name for your (ip|address)"
        r"|ip (name )?lookup failed|does not (have|resolve to) a (valid )?hostname"
        r"|unresolvable (ip|address)|dns (name )?lookup of .{0,40} failed",
    ),
    (
        "authfailure",
        r"\bspf\b|\bdkim\b|\bdmarc\b|sender policy framework|domainkeys"
        r"|not authenticated|unauthenticated (email|mail|message)"
        r"|authentication (check|result)s? (failed|failure)|\barc\b validation",
    ),
    ("badreputation", r"reputation|sender score|senderscore"),
    ("virusdetected", r"virus|malware|infected|trojan|worm detected|malicious"),
    (
        "spamdetected",
        r"spam(?!haus|cop|trap)|junk mail|bulk (e-?mail|mail)|unsolicited|phish|scam"
        r"|content (filter|scan)|looks like .{0,20}(spam|junk)|suspicious"
        r"|mail content denied",
    ),
    (
        "blocked",
        r"\bblock(ed)?\b|block ?list|black ?list|deny ?list|\bdnsbl\b|\brbl\b"
        r"|spamhaus|spamcop|barracuda|sorbs|\bsurbl\b|(?<!not )listed (at|in|on|by)"
        r"|client host .{0,60}(rejected|refused|denied)|(connection|access) (refused"
        r"|denied|rejected)|ip address .{0,40}(rejected|refused|denied|not allowed)"
        r"|not allowed to send|banned|(your|the) (ip|host|server|network)"
        r"[^.;]{0,40}(rejected|refused|denied|not allowed|not permitted)",
    ),
    (
        "toomanyconn",
        r"too many (connections|concurrent|sessions|simultaneous|open conn)"
        r"|connection (count|limit)|too many (smtp )?sessions",
    ),
    (
        "speeding",
        r"rate limit|ratelimit|rate-limit|throttl|too many (messages|mails|emails"
        r"|recipients|messages) (from|in|per|have been|this)|sending rate|try again later"
        r".{0,30}(volume|rate)|unusual rate|too fast|mail flood|exceed(ed|s)? .{0,30}"
        r"(sending|message|mail) (rate|limit|quota)",
    ),
    (
        "securityerror",
        r"authenticat(ion|e) (is )?required|must (first )?(authenticate|issue"
        r" a starttls)|tls (is )?required|requires? (tls|encryption|starttls)"
        r"|encryption required|(?<!delivery )not authori[sz]ed|unauthori[sz]ed|certificate"
        r"|secure connection required|access denied",
    ),
    (
        "mesgtoobig",
        r"message (size |length )?(is )?(too (big|large)|exceeds)|size limit|too"
        r" (big|large) for|message (file )?size exceed|exceeds? (the )?(max(imum)?"
        r"|allowed|message size|size)|mail(box)? size exceeds? .{0,20}message",
    ),
    (
        "mailboxfull",
        r"quota|mail ?box (is )?(full|over|exceeded)|full mailbox|mail ?box full"
        r"|(inbox|mailbox|account|storage|disk) (is )?(space )?(full|exceeded)"
        r"|exceeded (the )?storage|storage (allocation|space) exceeded"
        r"|(user|recipient) has (exhausted|run out of)|too much mail|mail ?box (size"
        r" )?limit|exceed(s|ed)? (his|her|their|the recipient's) .{0,20}(limit|size"
        r"|storage)|not enough (storage|space) (in|for) (the )?(user|mailbox)",
    ),
    (
        "systemfull",
        r"insufficient (system )?storage|(mail )?system (is )?full|out of (disk )?"
        r"space|disk (is )?full|no space left",
    ),
    (
        "expired",
        r"retry time(out)? (not reached|exceeded)|delivery time expired|message"
        r" (has )?expired|expired|could not be delivered (within|for)|time limit"
        r"|maximum time|too long in (the )?queue|retry timeout"
        r"|has been delayed for|undeliverable for .{0,20}(days|hours)",
    ),
    (
        "hasmoved",
        r"has moved|user not local|address (has )?changed|no longer (at|with|uses)"
        r"|moved to|forwarding address|new address",
    ),
    (
        "suspend",
        r"(account|mail ?box|user|recipient|address)\b[^.;]{0,40}\b(is |has been |was )"
        r"?(disabled|suspended|deactivated|inactive|locked|frozen|not active|on hold"
        r"|expired)|is not (an )?active|inactive (user|account|mailbox|recipient)"
        r"|(disabled|suspended|deactivated) (user|account|mailbox|recipient)",
    ),
    (
        "notaccept",
        r"null mx|does not accept (e-?)?mail|not accepting (any )?(e-?)?mail(?! from)"
        r"|accepts no mail|no mail (is )?accepted|indicated no smtp service"
        r"|not accepting network messages",
    ),
    (
        "hostunknown",
        r"host (or domain name )?(is )?(unknown|not found)|unknown host"
        r"|host [\w.-]+ not found"
        r"|(domain|host)( name)? (does not exist|not found|is unknown|unknown)"
        r"|no such (domain|host)|unrouteable (mail )?domain|nxdomain"
        r"|domain (is )?not (valid|resolvable|registered)|no (valid )?mx( record)?"
        r"|domain is not reachable|mx (lookup|record) (failed|not found)|name service error .{0,80}"
        r"(host not found|no such)|unknown domain|invalid domain|bad destination"
        r" (system|host|domain)|domain (has )?no (mail|mx)",
    ),
    (
        "userunknown",
        r"(user|recipient|address|mailbox|account|local[- ]part|alias|addressee)"
        r"\b[^.;:]{0,20}\b(unknown|not found|does ?n[o']t exist|does not exists"
        r"|not exist|is not valid|invalid|not listed|no longer (exists|valid"
        r"|available|active))"
        r"|unknown (user|recipient|mailbox|address|local[- ]part|alias|addressee"
        r"|e-?mail)|no such (user|mailbox|recipient|address|account|person|local)"
        r"|invalid (recipient|mailbox|user|address|e-?mail address|destination)"
        r"|not a (valid|known) (user|recipient|mailbox|address)|user not found"
        r"|no mailbox here|mailbox not found|recipient not found|unrouteable address"
        r"|not our customer|no (valid )?(user|mailbox|account) (here|by that name)"
        r"|doesn.t have an? .{0,30}account|account .{0,30}(does not|doesn.t) exist"
        r"|(deleted|closed|removed|terminated) (account|mailbox)|(account|mailbox)"
        r" (has been |was )?(deleted|closed|removed|terminated)|unknown or illegal"
        r"|bad destination mailbox|addressee unknown|recipient unknown"
        r"|not a valid recipient|does not exist"
        r"|user (is )?not (here|known)|no user|unknown in .{0,30}table"
        r"|(recipient|user) name is not recognized|invalid .{0,20}userid"
        r"|mailbox unavailable|no valid recipients|address (couldn.t|could not) be"
        r" found|address not found|not listed in .{0,30}(directory|address book)"
        r"|(宛先|アドレス|ユーザー?|受信者).{0,60}(存在しません|見つかりません)"
        r"|ディレクトリ.{0,10}(見つかりません|リストにありません)",
    ),
    (
        "filtered",
        r"delivery not authori[sz]ed|filtered|rejected by (the )?recipient"
        r"|recipient (has )?(refused|blocked|rejected)|will not accept|refused by"
        r" (the )?(user|recipient)|not accepting (e-?)?mail from",
    ),
    (
        "policyviolation",
        r"polic(y|ies)|prohibited|not (allowed|permitted)|administrative"
        r"|refused by administrator|blacklisted|forbidden|not accepted here",
    ),
    ("contenterror", r"content|attachment|media type|mime|encoding|8-?bit"),
    (
        "notcompliantrfc",
        r"rfc ?(2?822|5322|5321)|not (rfc )?compliant|duplicate header"
        r"|invalid header|malformed|header (error|syntax)|message-id",
    ),
    (
        "syntaxerror",
        r"syntax error|command (not )?(unrecognized|recognized|implemented)"
        r"|unrecognized command|bad sequence|parameter",
    ),
    (
        "networkerror",
        r"connection (refused|timed out|reset|closed|lost|died)|timed? ?out"
        r"|could not connect|can.t connect|unable to connect|no route to host"
        r"|network (is )?unreachable|host (is )?(unreachable|down)|loops? back to"
        r" myself|mail loop|routing loop|too many hops|hop count|lost connection"
        r"|temporary failure in name resolution|dns (error|failure|lookup)"
        r"|name service error|try again|broken pipe|tls (negotiation|handshake)"
        r" failed|protocol error",
    ),
    (
        "mailererror",
        r"mailer error|command died|program exit|exit (code|status)|unknown"
        r" mailer|procmail|pipe to|local delivery failed|x-unix",
    ),
    (
        "systemerror",
        r"system error|internal (server )?error|server error|local error"
        r"|misconfigur|configuration error|service (not available|unavailable)"
        r"|temporar|too busy|resources|i/o error|error in processing",
    ),
)
# Replies whose words and code together say more than either: they decide alone.
DEFINITE: tuple[tuple[Reason, re.Pattern[str]], ...] = (
    # Exchange Online's directory-based edge blocking: the recipient is not in the directory.
    ("userunknown", re.compile(r"5\.4\.1 .{0,80}recipient address rejected: access denied", re.I)),
    # Google Workspace: no such user in the domain.
    ("userunknown", re.compile(r"5\.1\.0 address rejected", re.I)),
)
WORDS: tuple[tuple[Reason, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(words, re.IGNORECASE)) for reason, words in _WORDS
)
# Readings the other one names more precisely when both speak.
# A status about the recipient's mailbox that their words may name better: "5.2.1 User unknown".
MAILBOX: frozenset[Reason] = frozenset({"suspend", "undefined"})
VAGUE: frozenset[Reason] = frozenset(
    {"undefined", "systemerror", "policyviolation", "filtered", "contenterror", "syntaxerror"}
)

STATUS_IN_TEXT = re.compile(r"(?<![\d.])([245])\.(\d{1,3})\.(\d{1,3})(?![\d])")
REPLY_IN_TEXT = re.compile(r"(?<![\d.])([245]\d\d)(?:[ :-]|$)")


def status_in(text: str) -> str | None:
    """The first enhanced status code (`5.1.1`) written in a text, if any."""
    found = STATUS_IN_TEXT.search(text)
    return ".".join(found.groups()) if found else None


def reply_in(text: str) -> str | None:
    """The first SMTP reply code (`550`) written in a text, if any."""
    found = REPLY_IN_TEXT.search(text)
    return found.group(1) if found else None


# A refusal before any recipient was named (the connection, HELO/EHLO, MAIL FROM) is about the
# sender, whatever its code or words say (DESIGN invariant 6).
SENDER_STAGE = re.compile(
    r"(after|in reply to) (the )?(initial connection|connect|greeting|banner|helo|ehlo|mail from)"
    r"|my name was rejected|while talking to .{0,80}>>> (helo|ehlo|mail from)",
    re.IGNORECASE,
)


def status_reason(status: str | None) -> Reason | None:
    """The reason an enhanced status code names (None for `x.y.0`, unknown or no code)."""
    if not status or not STATUS_IN_TEXT.fullmatch(status):
        return None
    return STATUS_REASONS.get(status.split(".", 1)[1])


def words_reason(diagnostic: str | None) -> Reason | None:
    """The reason the words of a reply name, if any."""
    if not diagnostic:
        return None
    return next((reason for reason, words in WORDS if words.search(diagnostic)), None)


def judge(status: str | None, reply: str | None, diagnostic: str | None) -> Verdict:
    """The reason and kind of one failed recipient (see the module)."""
    definite = next((r for r, words in DEFINITE if words.search(diagnostic or "")), None)
    # A code that the reply's own words do not carry is the reporting MTA's inference from
    # them ("Status: 5.7.1" for "553 Invalid recipient"): the words say more.
    inferred = bool(status and diagnostic and reply_in(diagnostic) and not status_in(diagnostic))
    by_status = definite or (
        None if inferred and words_reason(diagnostic) else status_reason(status)
    )
    by_words = definite or words_reason(diagnostic)
    # The null MX of RFC 7505 shares 5.1.10 with Exchange's RecipientNotFound.
    if by_status == "userunknown" and by_words == "notaccept":
        by_status = "notaccept"
    reason: Reason
    if by_status and by_words:
        if KIND[by_words] == "hard" and by_status not in MAILBOX and KIND[by_status] != "hard":
            reason = by_status  # "5.7.1 … user unknown": not sure enough to suppress
        elif KIND[by_status] == "hard" and KIND[by_words] != "hard":
            reason = by_words  # "5.1.1 … blocked by Spamhaus": about us after all
        elif by_status == "expired" or (by_words in VAGUE and by_status not in VAGUE):
            # x.4.7: the reporting MTA gave up; the words are only its last attempt's error.
            reason = by_status
        else:
            reason = by_words
    else:
        reason = by_words or by_status or "undefined"
    if KIND[reason] == "hard" and SENDER_STAGE.search(diagnostic or ""):
        reason = "rejected"  # refused before our recipient was named: about us
    temporary = (status or "").startswith("4") or (
        not (status or "").startswith("5") and (reply or "").startswith("4")
    )
    if temporary and KIND[reason] == "hard":
        reason = "undefined"  # it may yet be delivered: never a dead address
    return Verdict(reason, KIND[reason])


def reason_of(kind: Kind, status: str | None, reply: str | None, diagnostic: str | None) -> Reason:
    """The reason for a finding whose kind its source decided (a provider's event): the
    judged one when it is of that kind, else the kind's plain reason."""
    judged = judge(status, reply, diagnostic)
    return judged.reason if judged.kind == kind else FALLBACK[kind]


def classify(status: str | None, reply: str | None, diagnostic: str | None) -> Kind:
    """The kind of one failed recipient (see the module's table)."""
    return judge(status, reply, diagnostic).kind
