"""`membox view`: one self-contained HTML page of a memory (membox_local/view.py). The page's markup and data
through the doubles (one band per box, hostile text escaped, nothing fetched, the file private and written
atomically), then the page itself in a real headless Chromium (tests/browser.py): no console error, the boxes
shown, a click shows a box's messages, a trace highlights and links its boxes, no hostile text runs."""
from __future__ import annotations

import json
import os
import re
import stat
from html.parser import HTMLParser

import pytest

from membox_local.cli import main
from membox_local.ingest import load_jsonl
from membox_local.records import Event, Message
from membox_local.store import StoreError
from membox_local.view import CSP, SCRIPT, script_hash, collect, render_html, write_page

import browser
from conftest import DEMO

# Message text is untrusted: each of these must reach the page as text, and none may run
HOSTILE = [
    "<script>window.__pwned = 'script'</script> did you see that?",
    "</script><script>window.__pwned = 'json'</script> and the data block?",
    "<img src=x onerror=\"window.__pwned = 'img'\"> a picture",
    "<!-- {{script}} --> & \"quotes\" 'too' \u2028 done",
]
HOSTILE_CONV = "evil<b>"


def hostile_messages() -> list[Message]:
    """A second conversation in two sessions whose every message is hostile."""
    return [Message(HOSTILE_CONV, f"h{i}<i>", f"Mallory<script>{i}</script>", text, session=str(1 + i // 2),
                    session_date=f"{1 + i // 2} June 2024 <script>")
            for i, text in enumerate(HOSTILE)]


@pytest.fixture
def built(memory):
    """The demo conversation and the hostile one filed by the doubles; the hostile conversation's first box gets a
    hostile record, and a trace joins boxes of both its sessions (the doubles weave one-box traces only)."""
    memory.add(load_jsonl(DEMO) + hostile_messages(), seal=True)
    store = memory.store
    first, *rest = store.boxes(HOSTILE_CONV)
    events = store.save_extraction(first.id, "<script>window.__pwned = 'topic'</script>", ["<b>kw</b>", "a&b"],
                                   [Event(0, first.id, HOSTILE_CONV, "<svg onload=\"window.__pwned = 'event'\">",
                                          "1 June 2024", 0.2)])
    last = rest[-1]
    assert last.session != first.session
    later = store.save_extraction(last.id, last.topic, last.keywords,
                                  [Event(0, last.id, HOSTILE_CONV, "Mallory came back </script>", "2 June 2024", 1.0)])
    store.create_trace(HOSTILE_CONV, "</script><script>window.__pwned = 'trace'</script>",
                       [events[0].id, later[0].id])
    return memory


def page_of(memory, conversation_id=None) -> tuple[dict, str]:
    data = collect(memory.store, conversation_id, title="test <memory>")
    return data, render_html(data)


class Elements(HTMLParser):
    """The start tags of a page, with their attributes, and the text of each <script>."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        self._in_script = False if tag == "script" else self._in_script

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data

    def with_class(self, tag: str, cls: str) -> list[dict]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]


# ---- the page's markup and data --------------------------------------------------------------------------------

def test_one_band_per_box_grouped_by_session(built):
    data, page = page_of(built)
    els = Elements(page)
    bands = els.with_class("article", "box")
    boxes = built.boxes()
    assert sorted(int(b["data-box"]) for b in bands) == sorted(b.id for b in boxes)
    assert len(els.with_class("section", "conversation")) == 2
    for conv in data["conversations"]:
        assert [b["id"] for b in conv["boxes"]] == [b.id for b in built.boxes(conv["id"])]
    sessions = {(b.conversation_id, b.session, b.session_date) for b in boxes}
    assert len(els.with_class("div", "session")) == len(sessions) == 3 + 2  # the demo has three, the hostile two
    assert len(els.with_class("li", "trace")) == len(built.store.traces())


def test_hostile_text_is_escaped_and_comes_back_intact_from_the_data_block(built):
    data, page = page_of(built)
    for needle in ("<script>window", "</script><script>", "<img src=x", "<svg onload", "<b>kw</b>",
                   "<i>", "<memory>", "Mallory<script>"):
        assert needle not in page.replace(SCRIPT, ""), needle
    els = Elements(page)
    assert [t for t, _ in els.tags].count("script") == 2  # the data block and the page's own script, no other
    assert not [t for t, _ in els.tags if t in ("img", "b", "i", "iframe", "object")]
    assert len(els.with_class("svg", "links")) == [t for t, _ in els.tags].count("svg") == 2  # the trace lines'
    assert els.scripts[1] == SCRIPT
    assert json.loads(els.scripts[0]) == data  # escaped for the page, the same text for the script
    texts = [m["text"] for c in data["conversations"] for b in c["boxes"] for m in b["messages"]]
    assert all(h in texts for h in HOSTILE)
    assert "{{script}}" in page  # the memory's text is not a template
    assert "&lt;script&gt;window.__pwned = &#x27;topic&#x27;&lt;/script&gt;" in page


def test_the_page_fetches_nothing(built):
    _, page = page_of(built)
    assert not re.search(r"https?:|//[a-z0-9]", page, re.I), "the page names a network resource"
    assert not re.search(r"@import|url\(|<iframe|<object|<embed", page, re.I)
    for tag, attrs in Elements(page).tags:
        for name in ("src", "href", "action", "data"):
            assert attrs.get(name) in (None, "data:,"), (tag, attrs)
    assert "default-src 'none'" in CSP and f"script-src '{script_hash(SCRIPT)}'" in CSP
    csp = [a["content"] for t, a in Elements(page).tags if a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == [CSP]


def test_one_conversation_and_the_selector(built):
    _, page = page_of(built, HOSTILE_CONV)
    els = Elements(page)
    assert len(els.with_class("article", "box")) == len(built.boxes(HOSTILE_CONV))
    assert 'id="conversation-select"' not in page
    _, both = page_of(built)
    options = [a for t, a in Elements(both).tags if t == "option"]
    assert [o["value"] for o in options] == ["0", "1"]


def test_an_unknown_conversation_is_a_loud_error(built):
    with pytest.raises(StoreError, match="no conversation 'nope'.*maya-tom"):
        collect(built.store, "nope")


def test_an_empty_memory_is_a_loud_error(memory):
    with pytest.raises(StoreError, match="holds no conversation"):
        collect(memory.store)


def test_view_command_writes_a_private_file_atomically(built, tmp_path, capsys):
    built.close()
    out = tmp_path / "memory.html"
    out.write_text("old page")
    os.chmod(out, 0o644)
    assert main(["view", str(built.path), "-o", str(out)]) == 0
    assert "2 conversations" in capsys.readouterr().out
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert Elements(out.read_text(encoding="utf-8")).with_class("article", "box")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mem", "memory.html"]  # no temporary file left
    assert main(["view", str(built.path), "--conversation", "nope", "-o", str(out)]) == 2
    assert "no conversation 'nope'" in capsys.readouterr().err
    assert main(["view", str(tmp_path / "none"), "-o", str(out)]) == 2
    assert main(["view", str(built.path), "-o", str(tmp_path / "no-such-dir" / "m.html")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_failed_write_leaves_the_old_page_and_no_temporary_file(tmp_path, monkeypatch):
    out = tmp_path / "memory.html"
    out.write_text("old page")

    def broken(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_page(out, "new page")
    assert out.read_text() == "old page"
    assert [p.name for p in tmp_path.iterdir()] == ["memory.html"]


# ---- the page in a real browser ----------------------------------------------------------------------------------

@pytest.fixture
def chrome():
    reason = browser.missing()
    if reason:
        pytest.skip(f"no headless browser: {reason}")
    driver = browser.chromium()
    yield driver
    driver.quit()


def problems(driver) -> list[dict]:
    """Console messages of level WARNING or worse, JavaScript errors and CSP refusals among them."""
    return [e for e in driver.get_log("browser") if e["level"] in ("WARNING", "SEVERE")]


def visible(driver, selector: str):
    return [e for e in driver.find_elements("css selector", selector) if e.is_displayed()]


def test_page_in_chromium(built, tmp_path, chrome):
    data, page = page_of(built)
    from selenium.webdriver.support.ui import Select

    out = write_page(tmp_path / "memory.html", page)
    chrome.get(browser.file_url(out))
    assert problems(chrome) == []
    first, second = data["conversations"]
    demo, hostile = (first, second) if first["id"] == "maya-tom" else (second, first)
    picker = Select(chrome.find_element("id", "conversation-select"))
    picker.select_by_value(str(data["conversations"].index(demo)))

    # one conversation's boxes are shown, the other's are hidden behind the selector
    bands = visible(chrome, "article.box")
    assert [int(b.get_attribute("data-box")) for b in bands] == [b["id"] for b in demo["boxes"]]

    # clicking a box shows its messages, in order
    box = demo["boxes"][3]
    band = chrome.find_element("css selector", f'article.box[data-box="{box["id"]}"]')
    band.click()
    assert "selected" in band.get_attribute("class")
    shown = visible(chrome, ".detail-body ol.messages li")
    assert len(shown) == len(box["messages"])
    for li, m in zip(shown, box["messages"]):
        assert li.find_element("css selector", ".speaker").text == m["speaker"]
        assert li.find_element("css selector", ".mid").text == m["id"]
        assert m["text"] in li.text

    # the other conversation, through the selector: its boxes, and its hostile text shown as text
    picker.select_by_value(str(data["conversations"].index(hostile)))
    bands = visible(chrome, "article.box")
    assert [int(b.get_attribute("data-box")) for b in bands] == [b["id"] for b in hostile["boxes"]]
    for b, meta in zip(bands, hostile["boxes"]):
        b.click()
        shown = visible(chrome, ".detail-body ol.messages li")
        assert [li.find_element("css selector", ".speaker").text for li in shown] == \
            [m["speaker"] for m in meta["messages"]]
        for li, m in zip(shown, meta["messages"]):  # the hostile text, shown as it was written
            assert " ".join(m["text"].split()) in " ".join(li.text.split())
    assert "<script>window.__pwned = 'topic'</script>" in bands[0].text

    # a trace highlights the boxes it joins, across sessions, and draws a knob at each
    trace = next(t for t in hostile["traces"] if len(t["boxes"]) > 1)
    chrome.find_element("css selector", f'section:not([hidden]) .trace[data-trace="{trace["id"]}"]').click()
    lit = visible(chrome, "section:not([hidden]) article.box.in-trace")
    assert [int(b.get_attribute("data-box")) for b in lit] == trace["boxes"]
    assert len(chrome.find_elements("css selector", "section:not([hidden]) svg.links circle")) == len(trace["boxes"])

    # nothing hostile ran, nothing was fetched, nothing complained
    assert chrome.execute_script("return window.__pwned === undefined")
    assert chrome.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert problems(chrome) == []
