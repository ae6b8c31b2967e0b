"""Headless Chromium for the tests of `membox view`'s page (tests/test_view.py) and for its README screenshot
(docs/memory_view_screenshot.py), driven through selenium.

Nothing is downloaded: the browser is Debian's `chromium` and the driver Debian's `chromium-driver`
(`make install` installs both where it can: as root or with sudo, on a machine with apt-get), and selenium
(the `dev` extra) is pointed at them, so its Selenium Manager never runs. `missing()` says why a browser test
cannot run here, or None when it can."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser")  # Debian's name, then Ubuntu's
DRIVER = "chromedriver"


def _find(env: str, names: tuple[str, ...]) -> str | None:
    """The path in $env when set, else the first of `names` on PATH, else None."""
    return os.environ.get(env) or next((p for p in map(shutil.which, names) if p), None)


def chromium_path() -> str | None:
    """The Chromium binary ($MEMBOX_CHROMIUM, else `chromium` on PATH), or None."""
    return _find("MEMBOX_CHROMIUM", BROWSERS)


def driver_path() -> str | None:
    """The chromedriver binary ($MEMBOX_CHROMEDRIVER, else `chromedriver` on PATH), or None."""
    return _find("MEMBOX_CHROMEDRIVER", (DRIVER,))


def missing() -> str | None:
    """Why the browser cannot be driven here (a reason for pytest.skip), or None when it can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if chromium_path() is None:
        return "chromium is not installed (Debian: apt-get install chromium chromium-driver; `make install` does it as root)"
    if driver_path() is None:
        return "chromedriver is not installed (Debian: apt-get install chromium-driver)"
    return None


def chromium(width: int = 1280, height: int = 900):
    """A headless Chromium under selenium that keeps every console message and JavaScript error of the page
    (read them with `driver.get_log("browser")`). The caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium_path()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                f"--window-size={width},{height}", "--hide-scrollbars"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(driver_path()))


def file_url(path: str | Path) -> str:
    return Path(path).resolve().as_uri()
