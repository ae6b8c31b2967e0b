"""The README's picture of `membox view` (docs/memory-view.png): the demo memory's page in headless Chromium,
with a trace that joins boxes of several sessions followed and its last box open.

    make demo                                   # builds stores/demo
    .venv/bin/python docs/memory_view_screenshot.py [--store stores/demo] [--out docs/memory-view.png]

Chromium and chromedriver as for tests/test_view.py (Debian's packages; `make browser`)."""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import browser  # noqa: E402  (tests/browser.py: the headless Chromium the tests drive)

from membox_local.memory import open_store  # noqa: E402
from membox_local.view import collect, render_html, write_page  # noqa: E402


def page_of(store_dir: Path) -> tuple[dict, str]:
    if not (store_dir / "memory.db").exists():
        sys.exit(f"{store_dir}: no memory here; build the demo first (make demo)")
    store = open_store(store_dir)
    try:
        data = collect(store, title=store_dir.resolve().name)
    finally:
        store.close()
    return data, render_html(data)


def shown_trace(conv: dict) -> dict | None:
    """The trace to follow: of those joining boxes of several sessions, the one whose boxes lie closest together
    (so that one screen holds them all), then the one joining the most boxes."""
    place = {b["id"]: i for i, b in enumerate(conv["boxes"])}
    session = {b["id"]: b["session"] for b in conv["boxes"]}
    across = [t for t in conv["traces"] if len({session[b] for b in t["boxes"]}) > 1]
    spread = lambda t: (max(place[b] for b in t["boxes"]) - min(place[b] for b in t["boxes"]), -len(t["boxes"]))
    return min(across, key=spread, default=None)


# scroll far enough for the last box of the trace to be on screen, and when the page scrolls at all, past the
# whole header (no half-cut line at the top)
SCROLL_TO = """const band = document.querySelector(`article.box[data-box="${arguments[0]}"]`);
const need = band.getBoundingClientRect().bottom + window.scrollY - window.innerHeight + 16;
const header = document.querySelector("header.top").getBoundingClientRect().bottom + window.scrollY;
window.scrollTo(0, need > 0 ? Math.max(need, header) : 0);"""


def screenshot(page: str, data: dict, out: Path, width: int, height: int) -> None:
    """Open the page, follow a trace across sessions, open its last box, save what the window shows."""
    trace = shown_trace(data["conversations"][0])
    with tempfile.TemporaryDirectory() as tmp:
        html = write_page(Path(tmp) / "memory.html", page)
        driver = browser.chromium(width, height)
        try:
            driver.get(browser.file_url(html))
            if trace is not None:
                driver.find_element("css selector", f'.trace[data-trace="{trace["id"]}"]').click()
                last = trace["boxes"][-1]
                driver.find_element("css selector", f'article.box[data-box="{last}"]').click()
                driver.execute_script(SCROLL_TO, last)
            time.sleep(0.3)  # the click's repaint
            problems = [e for e in driver.get_log("browser") if e["level"] in ("WARNING", "SEVERE")]
            if problems:
                sys.exit(f"the page logged problems: {problems}")
            driver.save_screenshot(str(out))
        finally:
            driver.quit()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=REPO / "stores" / "demo")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "memory-view.png")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=1000)
    args = ap.parse_args()
    reason = browser.missing()
    if reason:
        sys.exit(f"no headless browser: {reason}")
    data, page = page_of(args.store)
    screenshot(page, data, args.out, args.width, args.height)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
