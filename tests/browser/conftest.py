"""Headless Debian Chromium driven by Selenium (the ``browser`` extra), and a ``kvscope serve`` on a free port.

Run with ``python -m pytest -m browser tests/browser`` (``.ci/tier_browser`` installs chromium,
chromium-driver and selenium first). Without them the tests skip with the reason.
"""

from __future__ import annotations

import shutil
import threading

import pytest


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="session")
def driver():
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install -e '.[browser]'")
    found = _chromium()
    if not found:
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1800"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(found[1]), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()


@pytest.fixture(scope="session")
def server():
    from kvscope.commands.serve import routes
    from kvscope.server import make_server
    srv = make_server(routes(), "127.0.0.1", 0, quiet=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    host, port = srv.server_address[:2]
    yield f"http://{host}:{port}"
    srv.shutdown()
    srv.server_close()


def console_errors(driver) -> list[dict]:
    """Severe console entries since the last call (reading the log empties it)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
