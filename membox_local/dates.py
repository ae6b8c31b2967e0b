"""Relative time in a message, resolved against its session's date.

A message said on 8 May 2023 that mentions "yesterday" or "last week" is shown to the answering model as
"yesterday (7 May 2023)" and "last week (the week before 8 May 2023)", so a small model need not do date
arithmetic. Session dates are parsed with dateparser ("1:56 pm on 8 May, 2023", "2023-05-08", ...), "N days/
weeks ago" with dateparser relative to that date, and month/weekday arithmetic with dateutil. Phrases are found
with a fixed list of patterns (below): free text is never searched for dates, so a word such as "may" or "now"
is never taken for one. A message whose session date cannot be parsed is shown as it is.
"""
from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from functools import lru_cache

_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUM = r"(?P<n>\d{1,2}|a couple of|couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?P<unit>day|week|month|year)s?"

# Longest phrases first: "the day before yesterday" before "yesterday", "last weekend" before "last week".
_PHRASES = re.compile(
    r"\b(?:"
    r"(?P<dby>the day before yesterday)"
    r"|(?P<ago>" + _NUM + r"\s+" + _UNIT + r"\s+ago)"
    r"|(?P<few>(?:a few|few|several)\s+(?P<fewunit>day|week|month|year)s\s+ago)"
    r"|(?P<rel>(?P<which>last|this|next)\s+(?P<what>weekend|week|month|year|" + "|".join(_WEEKDAYS) + r"))"
    r"|(?P<day>yesterday|today|tonight|tomorrow|last night|this morning|this afternoon|this evening)"
    r")\b",
    re.IGNORECASE,
)
_CLOCK = re.compile(r"^\s*\d{1,2}[:.]\d{2}\s*(?:[ap]\.?m\.?)?\s*(?:on\s+)?", re.IGNORECASE)


def fmt(d: date) -> str:
    return f"{d.day} {d:%B %Y}"


@lru_cache(maxsize=4096)  # every answer reads its context's date lines again (with_distance)
def parse_session_date(text: str) -> date | None:
    """The calendar day of a session date string, or None when there is none to read."""
    if not text or not text.strip():
        return None
    import dateparser

    core = _CLOCK.sub("", text).strip()  # LoCoMo's "1:56 pm on 8 May, 2023": the day is what matters
    parsed = dateparser.parse(core, languages=["en"], settings={"DATE_ORDER": "DMY", "STRICT_PARSING": True})
    return parsed.date() if parsed else None


def absolute_day(text: str) -> date | None:
    """The calendar day a date string names by itself (ISO 8601, "4 March 2024", "1:56 pm on 8 May, 2023", an RFC
    2822 date); None when it names none, or only one relative to today ("yesterday", "now", a bare number), so that
    the day never depends on when or where it is read. A time zone offset is kept as written (not converted)."""
    if not text or not text.strip():
        return None
    import dateparser

    parsed = dateparser.parse(text, languages=["en"], settings={
        "DATE_ORDER": "DMY", "STRICT_PARSING": True, "PARSERS": ["custom-formats", "absolute-time"]})
    return parsed.date() if parsed else None


def _ago(n: int, unit: str, base: date) -> date:
    import dateparser

    anchor = datetime(base.year, base.month, base.day, 12)
    parsed = dateparser.parse(f"{n} {unit}s ago", languages=["en"], settings={"RELATIVE_BASE": anchor})
    if parsed is None:  # dateparser reads every "N units ago"; this is a guard, not a path
        raise ValueError(f"dateparser could not read '{n} {unit}s ago'")
    return parsed.date()


def _month(base: date, shift: int) -> str:
    from dateutil.relativedelta import relativedelta

    return f"{base + relativedelta(months=shift):%B %Y}"


def _weekday(base: date, name: str, which: str) -> date:
    from dateutil.relativedelta import relativedelta, weekday

    wd = weekday(_WEEKDAYS.index(name.lower()))
    if which == "last":
        return base + relativedelta(days=-1, weekday=wd(-1))
    if which == "next":
        return base + relativedelta(days=+1, weekday=wd(+1))
    return base + relativedelta(weekday=wd(+1))  # "this friday": the coming one (or today)


def _weekend(base: date, which: str) -> str:
    saturday = _weekday(base, "saturday", "last" if which == "last" else "this")
    if which == "next":
        saturday += timedelta(days=7)
    return f"the weekend of {fmt(saturday)}"


def resolve_phrase(match: re.Match, base: date) -> str | None:
    """The absolute date a matched phrase means on `base` (a day, a week, a month or a year), as text."""
    g = match.groupdict()
    if g["dby"]:
        return fmt(base - timedelta(days=2))
    if g["day"]:
        word = g["day"].lower()
        if word in ("yesterday", "last night"):
            return fmt(base - timedelta(days=1))
        if word == "tomorrow":
            return fmt(base + timedelta(days=1))
        return fmt(base)
    if g["ago"]:
        n = int(g["n"]) if g["n"].isdigit() else _NUMBERS[g["n"].lower()]
        unit = g["unit"].lower()
        d = _ago(n, unit, base)
        if unit == "year":
            return str(d.year)
        if unit == "month":
            return f"{d:%B %Y}"
        return fmt(d) if unit == "day" else f"about {fmt(d)}"
    if g["few"]:
        return f"a few {g['fewunit'].lower()}s before {fmt(base)}"
    which, what = g["which"].lower(), g["what"].lower()
    shift = {"last": -1, "this": 0, "next": 1}[which]
    if what == "year":
        return str(base.year + shift)
    if what == "month":
        return _month(base, shift)
    if what == "week":
        return {"last": "the week before ", "this": "the week of ", "next": "the week after "}[which] + fmt(base)
    if what == "weekend":
        return _weekend(base, which)
    return fmt(_weekday(base, what, which))


@lru_cache(maxsize=1 << 16)  # a pure function of two strings; retrieval shows the same turns again and again
def resolve_relative(text: str, session_date: str) -> str:
    """`text` with each relative time phrase followed by its absolute date in parentheses."""
    base = parse_session_date(session_date)
    if base is None or not _PHRASES.search(text):
        return text
    return _PHRASES.sub(lambda m: f"{m.group(0)} ({resolve_phrase(m, base)})", text)


def relative_phrases(text: str, session_date: str) -> list[tuple[str, str]]:
    """Each relative time phrase of `text` (as written) with the absolute date it means on `session_date`, in order;
    [] when the date cannot be read."""
    base = parse_session_date(session_date)
    if base is None:
        return []
    out = []
    for m in _PHRASES.finditer(text):
        when = resolve_phrase(m, base)
        if when:
            out.append((m.group(0), when))
    return out


# ---- how long before the day a question is asked (LongMemEval: "how many days ago...") -------------
_DATE_LINE = re.compile(r"^\[(?P<date>[^\]]+)\]", re.MULTILINE)


def ago(day: date, today: date) -> str | None:
    """How long before `today` a day was, in the words an answer uses: "today", "1 day ago", "20 days (about 3
    weeks) ago", "110 days (about 4 months) ago"; None for a day after `today`."""
    n = (today - day).days
    if n < 0:
        return None
    if n == 0:
        return "today"
    if n < 14:
        return f"{n} day{'s' if n > 1 else ''} ago"
    if n < 60:
        return f"{n} days (about {round(n / 7)} weeks) ago"
    return f"{n} days (about {round(n / 30.44)} months) ago"


def with_distance(context: str, today: str) -> str:
    """`context` with each date line ("[14:35 on 20 January, 2023]", a line starting with a bracketed date)
    followed by how long before `today` it was ("[14:35 on 20 January, 2023; 55 days (about 8 weeks) ago]"), so
    that a small answering model reads the count instead of working it out. Unparsable dates stay as they are."""
    now = parse_session_date(today)
    if now is None:
        return context

    def mark(m: re.Match) -> str:
        day = parse_session_date(m.group("date"))
        said = ago(day, now) if day else None
        return f"[{m.group('date')}; {said}]" if said else m.group(0)

    return _DATE_LINE.sub(mark, context)


# ---- an event's time expression (systems/eventweave.py) ------------------------------------------
_LEAD = re.compile(r"^(?:back in|in|on|at|during|around|about|by|from|since|until|till|for)\s+", re.IGNORECASE)
_ORDINAL_DAY = re.compile(r"^(?:the\s+)?(\d{1,2})(?:st|nd|rd|th)$", re.IGNORECASE)  # "the 7th": dateparser reads July


def find_time_phrase(text: str) -> str | None:
    """The first relative time phrase of the fixed list (above) in `text`, as written; None when there is none."""
    m = _PHRASES.search(text)
    return m.group(0) if m else None


def _month_span(d: date) -> tuple[date, date]:
    from dateutil.relativedelta import relativedelta

    first = d.replace(day=1)
    return first, first + relativedelta(months=1, days=-1)


def _phrase_span(match: re.Match, base: date) -> tuple[date, date] | None:
    """The days a matched phrase covers on `base` (first, last), as resolve_phrase reads it; None when vague."""
    g = match.groupdict()
    if g["dby"]:
        d = base - timedelta(days=2)
        return d, d
    if g["day"]:
        word = g["day"].lower()
        d = base - timedelta(days=1) if word in ("yesterday", "last night") else \
            base + timedelta(days=1) if word == "tomorrow" else base
        return d, d
    if g["ago"]:
        n = int(g["n"]) if g["n"].isdigit() else _NUMBERS[g["n"].lower()]
        unit = g["unit"].lower()
        d = _ago(n, unit, base)
        if unit == "year":
            return date(d.year, 1, 1), date(d.year, 12, 31)
        if unit == "month":
            return _month_span(d)
        return (d, d) if unit == "day" else (d - timedelta(days=3), d + timedelta(days=3))
    if g["few"]:
        return None
    which, what = g["which"].lower(), g["what"].lower()
    shift = {"last": -1, "this": 0, "next": 1}[which]
    if what == "year":
        return date(base.year + shift, 1, 1), date(base.year + shift, 12, 31)
    if what == "month":
        from dateutil.relativedelta import relativedelta

        return _month_span(base + relativedelta(months=shift))
    if what == "week":
        if which == "last":
            return base - timedelta(days=7), base - timedelta(days=1)
        if which == "next":
            return base + timedelta(days=1), base + timedelta(days=7)
        monday = base - timedelta(days=base.weekday())
        return monday, monday + timedelta(days=6)
    if what == "weekend":
        saturday = _weekday(base, "saturday", "last" if which == "last" else "this")
        saturday += timedelta(days=7) if which == "next" else timedelta(0)
        return saturday, saturday + timedelta(days=1)
    d = _weekday(base, what, which)
    return d, d


def resolve_when(expression: str, session_date: str) -> tuple[str, str, str] | None:
    """The absolute date an event's time expression means when said on `session_date`, as (text shown, first day,
    last day), the days ISO (YYYY-MM-DD; both "" when the expression is vague, e.g. "a few weeks ago"). A relative
    phrase of the fixed list is resolved as in messages (resolve_phrase); any other expression ("in June", "2019",
    "on Friday", "5 May") is read by dateparser relative to the session date, to its day, month or year. None when
    the session date or the expression cannot be read."""
    base = parse_session_date(session_date)
    text = " ".join(expression.split())
    if base is None or not text:
        return None
    match = _PHRASES.search(text)
    if match:
        span = _phrase_span(match, base)
        return resolve_phrase(match, base) or "", *((span[0].isoformat(), span[1].isoformat()) if span else ("", ""))
    text = _LEAD.sub("", text)
    day = _ORDINAL_DAY.match(text)
    if day:  # a day of the session's month
        try:
            d = base.replace(day=int(day.group(1)))
        except ValueError:
            return None
        return fmt(d), d.isoformat(), d.isoformat()
    from dateparser.date import DateDataParser

    anchor = datetime(base.year, base.month, base.day, 12)
    parsed = DateDataParser(languages=["en"], settings={"RELATIVE_BASE": anchor}).get_date_data(text)
    if parsed is None or parsed.date_obj is None:
        return None
    d = parsed.date_obj.date()
    if parsed.period == "year":
        return str(d.year), date(d.year, 1, 1).isoformat(), date(d.year, 12, 31).isoformat()
    if parsed.period == "month":
        first, last = _month_span(d)
        return f"{d:%B %Y}", first.isoformat(), last.isoformat()
    if parsed.period == "week":
        return f"the week of {fmt(d)}", (d - timedelta(days=3)).isoformat(), (d + timedelta(days=3)).isoformat()
    return fmt(d), d.isoformat(), d.isoformat()
