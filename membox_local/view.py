"""`membox view STORE -o memory.html`: one self-contained HTML page that shows a memory as a timeline.

Each conversation is laid out session by session under its date; each box is a band with its topic, keywords
and events; the Trace Weaver's traces are listed beside it, and hovering or clicking one highlights the boxes
it joins and draws a line between them across sessions; clicking a box shows its messages, clicking an event's
source (a message id) shows and highlights the message it was read from. Several conversations get a selector.

The page needs nothing at view time: its CSS and JavaScript are inline, no font, image or script is fetched,
and its Content-Security-Policy forbids every fetch and every script but its own (by hash). The memory's text is
untrusted (messages, and what models wrote from them): in the markup it is HTML-escaped, and the data the
script reads is JSON in a `<script type="application/json">` block with `<`, `>` and `&` escaped, so no text can
close that block; the script puts text into the page only through `textContent`.

`collect` reads a store into plain data, `render_html` turns that data into the page (a pure function), and
`write_page` writes it owner-only (0600) and atomically.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import secrets
import sys
from pathlib import Path

from .ingest import InputError
from .memory import open_store
from .private import private_open
from .records import Box, Event, Trace
from .show import dropped_text
from .store import StoreError
from .view_style import STYLE

# below this grounding an event is shown flagged as weakly grounded, as `membox show` flags it
WEAK_GROUNDING = 0.5
# trace colours: a trace gets the class c0..c7 by its place in its conversation's trace list
COLOURS = 8


# ---- data: what the page shows, read from a store --------------------------------------------------------------

def collect(store, conversation_id: str | None = None, title: str = "") -> dict:
    """The page's data: every conversation of the store (or the one named) with its boxes in time order (their
    messages, record and events) and its traces (the events and boxes each joins). Plain dicts and lists, the
    JSON the page embeds. A store without the box memory, without conversations, or without the conversation
    named is a StoreError."""
    if not hasattr(store, "boxes"):
        raise StoreError(f"{store.path}: this memory has no box memory (membox) to show")
    known = store.conversations()
    if conversation_id is not None and conversation_id not in known:
        raise StoreError(f"{store.path}: no conversation {conversation_id!r} in this memory "
                         f"(its conversations: {', '.join(known[:10]) or 'none'}{' ...' if len(known) > 10 else ''})")
    if not known:
        raise StoreError(f"{store.path}: this memory holds no conversation yet (build one with `membox build`)")
    convs = [conversation_id] if conversation_id is not None else known
    return {"title": title, "conversations": [conversation_data(store, c) for c in convs]}


def conversation_data(store, conversation_id: str) -> dict:
    """One conversation: its boxes in the order of their first message, its traces, and how many of its
    messages are stored but not filed into a box yet."""
    boxes = sorted(store.boxes(conversation_id), key=_first_seq)
    traced = store.traces_with_events(conversation_id)
    traces_of_event: dict[int, list[int]] = {}
    for trace, events in traced:
        for e in events:
            traces_of_event.setdefault(e.id, []).append(trace.id)
    stored = len(store.messages(conversation_id))
    filed = sum(len(b.messages) for b in boxes)
    # message id -> (its box, its place there): where an event's source is shown (the anchor msg-BOX-PLACE)
    places = {m.message_id: (b.id, i) for b in boxes for i, m in enumerate(b.messages)}
    return {"id": conversation_id, "messages": stored, "unfiled": max(0, stored - filed),
            "boxes": [box_data(b, traces_of_event, places) for b in boxes],
            "traces": [trace_data(t, events) for t, events in traced]}


def _first_seq(box: Box) -> tuple[int, int]:
    """A box's place in its conversation: the arrival order of its first message (then its id)."""
    return (box.messages[0].seq if box.messages else sys.maxsize, box.id)


def box_data(box: Box, traces_of_event: dict[int, list[int]], places: dict[str, tuple[int, int]]) -> dict:
    return {"id": box.id, "session": box.session, "date": box.session_date, "status": box.status,
            "topic": box.topic, "keywords": list(box.keywords), "error": box.error, "note": box.note,
            "dropped": dict(box.dropped),
            "messages": [{"id": m.message_id, "speaker": m.speaker, "text": m.text} for m in box.messages],
            "events": [event_data(e, traces_of_event.get(e.id, []), places) for e in box.events]}


def event_data(event: Event, traces: list[int], places: dict[str, tuple[int, int]]) -> dict:
    """An event; its sources (None: extracted before events kept them) each with the box and place of the message
    (null when no box of the conversation holds it)."""
    sources = None if event.sources is None else [
        {"id": m, "box": places[m][0] if m in places else None, "at": places[m][1] if m in places else None}
        for m in event.sources]
    return {"id": event.id, "text": event.text, "date": event.date, "grounding": round(event.grounding, 3),
            "traces": traces, "sources": sources}


def trace_data(trace: Trace, events: list[Event]) -> dict:
    """A trace with its events in conversation order and the boxes they come from, each once, in that order."""
    dates = list(dict.fromkeys(e.date for e in events if e.date))
    return {"id": trace.id, "summary": trace.summary, "events": [e.id for e in events],
            "boxes": list(dict.fromkeys(e.box_id for e in events)),
            "first_date": dates[0] if dates else "", "last_date": dates[-1] if dates else ""}


# ---- the page: a pure function of the data -------------------------------------------------------------------

def render_html(data: dict) -> str:
    """The whole page for `collect`'s data: markup for every box and trace (text escaped), the data itself as
    escaped JSON for the script, inline CSS and JavaScript, and a policy that lets the page fetch nothing."""
    convs = data["conversations"]
    title = "Membox memory" + (f": {data['title']}" if data.get("title") else "")
    parts = {"csp": esc(CSP), "title": esc(title), "style": STYLE, "selector": selector_html(convs),
             "conversations": "\n".join(conversation_html(i, c, hidden=i > 0) for i, c in enumerate(convs)),
             "data": json_for_script(data), "script": SCRIPT}
    # one pass over the template: a {{name}} inside the memory's text is never substituted
    return re.sub(r"\{\{(\w+)\}\}", lambda m: parts[m.group(1)], PAGE)


def esc(text: object) -> str:
    """Text as HTML character data or a quoted attribute value: & < > \" ' escaped."""
    return html.escape(str(text), quote=True)


def json_for_script(data: dict) -> str:
    """JSON safe inside <script type="application/json">: with < > & written as \\u escapes no text can end the
    block (`</script>`) or open a comment in it (`<!--`); U+2028/2029 escaped as well, for old parsers."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)  # NaN: not JSON
    for ch, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                        ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, escaped)
    return text


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("x") else "s")


def selector_html(convs: list[dict]) -> str:
    """A conversation selector when there are several (the script shows one section at a time)."""
    if len(convs) < 2:
        return ""
    options = "".join(f'<option value="{i}">{esc(c["id"])} ({plural(len(c["boxes"]), "box")})</option>'
                      for i, c in enumerate(convs))
    return (f'<label class="picker">Conversation <select id="conversation-select">{options}</select></label>')


def trace_classes(conv: dict) -> dict[int, str]:
    """Trace id -> its colour class, by its place in the conversation's trace list."""
    return {t["id"]: f"c{i % COLOURS}" for i, t in enumerate(conv["traces"])}


def conversation_html(index: int, conv: dict, hidden: bool) -> str:
    colours = trace_classes(conv)
    sessions = sessions_of(conv["boxes"])
    counts = (f'{plural(conv["messages"], "message")}, {plural(len(conv["boxes"]), "box")} in '
              f'{plural(len(sessions), "session")}, {plural(len(conv["traces"]), "trace")}')
    notes = (f'<p class="note">{plural(conv["unfiled"], "message")} not filed into a box yet '
             f'(the next <code>membox build</code> files them).</p>') if conv["unfiled"] else ""
    if any(e["sources"] is None for b in conv["boxes"] for e in b["events"]):
        notes += ('<p class="note">Some events were extracted before events kept the messages they were read '
                  'from: build the memory again from its data into a new folder to give them their sources.</p>')
    timeline = "\n".join(session_html(s, colours) for s in sessions) or \
        '<p class="empty">No boxes yet.</p>'
    return f"""<section class="conversation" data-conversation="{index}"{' hidden' if hidden else ''}>
<h2 class="conv-head">{esc(conv["id"])} <span class="counts">{counts}</span></h2>
{notes}<div class="layout">
<div class="timeline"><svg class="links" aria-hidden="true"></svg>
{timeline}
</div>
<aside class="side">
{traces_html(conv, colours)}
<section class="detail" aria-live="polite"><h3>Messages</h3>
<div class="detail-body"><p class="hint">Click a box to read its messages.</p></div></section>
</aside>
</div>
</section>"""


def sessions_of(boxes: list[dict]) -> list[dict]:
    """Consecutive boxes of one session (and date), grouped: the timeline's rows."""
    out: list[dict] = []
    for b in boxes:
        if not out or (out[-1]["session"], out[-1]["date"]) != (b["session"], b["date"]):
            out.append({"session": b["session"], "date": b["date"], "boxes": []})
        out[-1]["boxes"].append(b)
    return out


def session_html(session: dict, colours: dict[int, str]) -> str:
    n_msgs = sum(len(b["messages"]) for b in session["boxes"])
    date = esc(session["date"]) if session["date"] else "no date"
    bands = "\n".join(band_html(b, colours) for b in session["boxes"])
    return f"""<div class="session">
<div class="when"><div class="date">{date}</div><div class="sess">session {esc(session["session"])}</div>
<div class="sess">{plural(len(session["boxes"]), "box")}, {plural(n_msgs, "message")}</div></div>
<div class="bands">
{bands}
</div>
</div>"""


def band_html(box: dict, colours: dict[int, str]) -> str:
    """One box: a band with its id, topic, size, status (when not extracted), keywords, events and error."""
    topic = esc(box["topic"]) if box["topic"] else '<span class="none">no topic yet</span>'
    status = "" if box["status"] == "extracted" else f' <span class="status">{esc(box["status"])}</span>'
    keywords = "".join(f"<li>{esc(k)}</li>" for k in box["keywords"])
    events = "".join(event_html(e, colours, box["date"]) for e in box["events"])
    error = f'<p class="error">{esc(box["error"])}</p>' if box["error"] else ""
    error += f'<p class="note">{esc(box["note"])}</p>' if box.get("note") else ""  # an excerpt's record
    dropped = dropped_text(box.get("dropped") or {})  # what the code dropped or corrected in the model's record
    error += f'<p class="note dropped">{esc(dropped)}</p>' if dropped else ""
    return (f'<article class="box status-{esc(box["status"])}" data-box="{box["id"]}" tabindex="0" role="button" '
            f'aria-pressed="false">'
            f'<div class="box-head"><span class="box-id">#{box["id"]}</span> <h4 class="topic">{topic}</h4>'
            f'<span class="size">{plural(len(box["messages"]), "message")}</span>{status}</div>'
            + (f'<ul class="keywords">{keywords}</ul>' if keywords else "")
            + (f'<ul class="events">{events}</ul>' if events else "")
            + error + "</article>")


def event_html(event: dict, colours: dict[int, str], box_date: str) -> str:
    """An event with a coloured dot per trace it is in (hover or click one to follow that trace), and its date
    when that is not its box's session date."""
    dots = "".join(f'<span class="dot {colours[t]}" data-trace="{t}" title="follow trace {t}"></span>'
                   for t in event["traces"] if t in colours)
    weak = event["grounding"] < WEAK_GROUNDING
    flag = f' <span class="weak" title="few of its words are in the box">weakly grounded ' \
           f'({event["grounding"]:.2f})</span>' if weak else ""
    date = f' <span class="event-date">{esc(event["date"])}</span>' if event["date"] not in ("", box_date) else ""
    trace_ids = " ".join(str(t) for t in event["traces"])
    return (f'<li data-event="{event["id"]}" data-traces="{trace_ids}">{dots}{esc(event["text"])}{date}{flag}'
            f'{sources_html(event["sources"] or [])}</li>')


def sources_html(sources: list[dict]) -> str:
    """An event's sources, each a chip with the message id: a click shows the message (anchor msg-BOX-PLACE)."""
    chips = "".join(
        f'<span class="source" role="button" tabindex="0" data-cite="msg-{s["box"]}-{s["at"]}" '
        f'data-cite-box="{s["box"]}" title="show the message">{esc(s["id"])}</span>' if s["box"] is not None else
        f'<span class="source missing" title="no box holds this message">{esc(s["id"])}</span>' for s in sources)
    return f' <span class="sources">{chips}</span>' if chips else ""


def traces_html(conv: dict, colours: dict[int, str]) -> str:
    """The trace list: summary, span and the boxes each trace joins."""
    if not conv["traces"]:
        return ('<section class="traces"><h3>Traces</h3><p class="hint">No traces (they are woven when boxes are '
                'extracted with [weaver] enabled = true).</p></section>')
    items = "\n".join(trace_item_html(t, colours[t["id"]]) for t in conv["traces"])
    return (f'<section class="traces"><h3>Traces</h3><p class="hint">Hover a trace to see the boxes it joins; '
            f'click to keep it.</p><ol>\n{items}\n</ol></section>')


def trace_item_html(trace: dict, colour: str) -> str:
    span = trace["first_date"] if trace["first_date"] == trace["last_date"] else \
        f'{trace["first_date"]} .. {trace["last_date"]}'
    joins = " ".join(f'<span class="join" data-join="{b}" title="show box {b}">#{b}</span>' for b in trace["boxes"])
    summary = esc(trace["summary"]) if trace["summary"] else '<span class="none">no summary</span>'
    return (f'<li class="trace {colour}" data-trace="{trace["id"]}" tabindex="0" role="button" aria-pressed="false">'
            f'<span class="swatch"></span><span class="summary">{summary}</span>'
            f'<span class="span">{plural(len(trace["events"]), "event")} in {plural(len(trace["boxes"]), "box")}'
            f'{", " + esc(span) if span else ""}</span><span class="joins">{joins}</span></li>')


# ---- writing the file -------------------------------------------------------------------------------------------

def write_page(path: str | Path, text: str) -> Path:
    """Write the page owner-only (0600, private.py) and atomically: into a new temporary file beside `path`,
    flushed to disk, then renamed over it. A reader sees the old page or the new one, never half of one; an
    interrupted write leaves no temporary file behind."""
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{target} is a folder; give the HTML file to write, e.g. {target / 'memory.html'}")
    if not target.parent.is_dir():
        raise InputError(f"{target}: the folder {target.parent} does not exist")
    tmp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    try:
        with private_open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


# ---- the command ------------------------------------------------------------------------------------------------

def add_parser(subparsers) -> None:
    p = subparsers.add_parser("view", help="write one self-contained HTML page showing a memory's boxes and traces")
    p.add_argument("store", help="memory folder")
    p.add_argument("--conversation", help="only this conversation (default: every one, with a selector)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html",
                   help="the page to write (owner-only, replaced atomically)")
    p.set_defaults(func=cmd_view)


def cmd_view(args) -> int:
    folder = Path(args.store)
    if not (folder / "memory.db").exists():
        raise InputError(f"{folder}: no memory here; create one with `membox build DATA --store {folder}`")
    store = open_store(folder)
    try:
        data = collect(store, args.conversation, title=folder.resolve().name)
    finally:
        store.close()
    out = write_page(args.output, render_html(data))
    convs = data["conversations"]
    print(f"wrote {out}: {plural(len(convs), 'conversation')}, "
          f"{plural(sum(len(c['boxes']) for c in convs), 'box')}, "
          f"{plural(sum(len(c['traces']) for c in convs), 'trace')}")
    return 0


# ---- the page's parts (its CSS: view_style.py) -------------------------------------------------------------------

SCRIPT = """
"use strict";
(() => {
  const data = JSON.parse(document.getElementById("membox-data").textContent);
  const sections = Array.from(document.querySelectorAll("section.conversation"));
  const views = sections.map((section) => conversationView(section, data.conversations[+section.dataset.conversation]));
  const picker = document.getElementById("conversation-select");
  if (picker) {
    picker.addEventListener("change", () => {
      sections.forEach((s) => { s.hidden = s.dataset.conversation !== picker.value; });
      views.forEach((v) => v.redraw());
    });
  }
  window.addEventListener("resize", () => views.forEach((v) => v.redraw()));

  // One conversation's section: selecting a box shows its messages; a trace (hovered, or kept by a click)
  // highlights the boxes and events it joins and links them with a line in the timeline's gutter.
  function conversationView(section, conv) {
    const boxes = new Map(conv.boxes.map((b) => [String(b.id), b]));
    const traces = new Map(conv.traces.map((t) => [String(t.id), t]));
    const timeline = section.querySelector(".timeline");
    const svg = section.querySelector("svg.links");
    const detail = section.querySelector(".detail-body");
    let kept = null;  // the trace a click keeps highlighted
    let shown = null;  // the trace highlighted now

    section.querySelectorAll(".box").forEach((band) => {
      band.addEventListener("click", () => selectBox(band));
      band.addEventListener("keydown", (e) => {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); selectBox(band); }
      });
    });
    section.querySelectorAll("[data-join]").forEach((chip) => {
      chip.addEventListener("click", (e) => {
        e.stopPropagation();
        const band = section.querySelector(`.box[data-box="${chip.dataset.join}"]`);
        selectBox(band);
        band.scrollIntoView({ block: "center" });
      });
    });
    section.querySelectorAll(".source[data-cite]").forEach((chip) => {
      const cite = (e) => { e.stopPropagation(); e.preventDefault(); showSource(chip); };
      chip.addEventListener("click", cite);
      chip.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") cite(e); });
    });
    section.querySelectorAll("[data-trace]").forEach((el) => {
      el.addEventListener("mouseenter", () => showTrace(el.dataset.trace));
      el.addEventListener("mouseleave", () => showTrace(kept));
      el.addEventListener("click", (e) => { e.stopPropagation(); keep(el.dataset.trace); });
      el.addEventListener("keydown", (e) => {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); keep(el.dataset.trace); }
      });
    });

    function keep(id) {
      kept = kept === id ? null : id;
      showTrace(kept);
    }

    function selectBox(band) {
      section.querySelectorAll(".box.selected").forEach((b) => {
        b.classList.remove("selected");
        b.setAttribute("aria-pressed", "false");
      });
      band.classList.add("selected");
      band.setAttribute("aria-pressed", "true");
      renderMessages(boxes.get(band.dataset.box));
    }

    // An event's source: its message's box selected, the message (anchor msg-BOX-PLACE) highlighted and shown.
    function showSource(chip) {
      const band = section.querySelector(`.box[data-box="${chip.dataset.citeBox}"]`);
      if (!band) return;
      selectBox(band);
      const message = document.getElementById(chip.dataset.cite);
      if (!message) return;
      message.classList.add("cited");
      message.scrollIntoView({ block: "nearest" });
    }

    function renderMessages(box) {
      detail.replaceChildren();
      const head = el("h4", `#${box.id} ${box.topic || "(no topic yet)"}`);
      const meta = el("p", [box.date || "no date", `session ${box.session}`, box.status,
                            `${box.messages.length} message${box.messages.length === 1 ? "" : "s"}`].join(" \\u00b7 "));
      meta.className = "meta";
      const list = el("ol");
      list.className = "messages";
      box.messages.forEach((m, i) => {
        const item = el("li");
        item.id = `msg-${box.id}-${i}`;
        const who = el("span", m.speaker);
        who.className = "speaker";
        const id = el("span", m.id);
        id.className = "mid";
        item.append(who, document.createTextNode(m.text), id);
        list.append(item);
      });
      detail.append(head, meta, list);
    }

    function showTrace(id) {
      shown = id;
      section.classList.remove("tracing");
      section.querySelectorAll(".in-trace").forEach((n) => n.classList.remove("in-trace"));
      section.querySelectorAll(".trace.active").forEach((n) => {
        n.classList.remove("active");
        n.setAttribute("aria-pressed", "false");
      });
      svg.replaceChildren();
      const trace = id === null ? undefined : traces.get(id);
      if (!trace) return;
      const item = section.querySelector(`.trace[data-trace="${trace.id}"]`);
      item.classList.add("active");
      item.setAttribute("aria-pressed", String(id === kept));
      section.style.setProperty("--trace", getComputedStyle(item).getPropertyValue("--c"));
      section.classList.add("tracing");
      const bands = trace.boxes.map((b) => section.querySelector(`.box[data-box="${b}"]`)).filter(Boolean);
      bands.forEach((b) => b.classList.add("in-trace"));
      section.querySelectorAll(".events li[data-traces]").forEach((li) => {
        if (li.dataset.traces.split(" ").includes(String(trace.id))) li.classList.add("in-trace");
      });
      drawLinks(bands);
    }

    // A vertical line in the gutter left of the bands, with a tick and a knob at each box of the trace.
    function drawLinks(bands) {
      if (!bands.length || section.hidden) return;
      const origin = timeline.getBoundingClientRect();
      svg.setAttribute("width", String(timeline.scrollWidth));
      svg.setAttribute("height", String(timeline.scrollHeight));
      const points = bands.map((b) => {
        const r = b.getBoundingClientRect();
        return { x: r.left - origin.left, y: r.top - origin.top + 14 };
      }).sort((a, b) => a.y - b.y);
      const gutter = points[0].x - 12;
      let d = `M ${gutter} ${points[0].y} V ${points[points.length - 1].y}`;
      points.forEach((p) => { d += ` M ${gutter} ${p.y} H ${p.x}`; });
      svg.append(shape("path", { d, fill: "none", stroke: "var(--trace)", "stroke-width": "3",
                                 "stroke-linecap": "round" }));
      points.forEach((p) => svg.append(shape("circle", { cx: gutter, cy: p.y, r: "4.5", fill: "var(--trace)" })));
    }

    function shape(name, attrs) {
      const node = document.createElementNS(svg.namespaceURI, name);
      Object.entries(attrs).forEach(([k, v]) => node.setAttribute(k, String(v)));
      return node;
    }

    return { redraw: () => showTrace(shown) };
  }

  // An element whose text is set as text, never parsed as markup.
  function el(tag, text) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    return node;
  }
})();
"""


def script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


# Nothing may be fetched (no font, image, script, frame or connection); the only script allowed to run is the
# page's own, named by its hash, so even a script that escaping had missed would not run.
CSP = (f"default-src 'none'; script-src '{script_hash(SCRIPT)}'; style-src 'unsafe-inline'; img-src data:; "
       f"base-uri 'none'; form-action 'none'")

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{csp}}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>{{title}}</title>
<style>{{style}}</style>
</head>
<body>
<header class="top"><h1>{{title}}</h1>{{selector}}
<p class="legend">Sessions run top to bottom under their dates; each band is a topic box. Click a box to read its
messages, an event's source (a message id) to see the message it was read from; hover or click a trace (or a
coloured dot) to follow it across sessions.</p></header>
<main>
{{conversations}}
</main>
<script type="application/json" id="membox-data">{{data}}</script>
<script>{{script}}</script>
</body>
</html>
"""
