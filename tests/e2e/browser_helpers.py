"""A real browser for the e2e tests: Debian's chromium, headless, driven by selenium through
chromedriver (Debian: `chromium`, `chromium-driver`). Without them a test is skipped, except
in CI (`CI` set), where it fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest


def binaries() -> tuple[str, str]:
    """chromium and chromedriver, or skip (fail in CI: the browser test must run there)."""
    browser = next(
        (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))),
        None,
    )
    driver = shutil.which("chromedriver")
    if browser and driver:
        return browser, driver
    missing = ", ".join(n for n, f in (("chromium", browser), ("chromedriver", driver)) if not f)
    reason = (
        f"the console's browser test needs {missing} (apt-get install chromium chromium-driver)"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@contextlib.contextmanager
def chromium(browser: str, driver_path: str) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="aim-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = browser
        for argument in (
            "--headless=new",
            "--no-sandbox",  # root in a container has no user namespace for the sandbox
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1440,1000",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
        ):
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
        try:
            yield driver
        finally:
            driver.quit()


def library_script(arguments: str, body: str) -> str:
    """A script for `Device.script`: `arguments` named (`service` first, `done` last), `body`
    run with the browser library imported from the service as `lib`; what it throws goes to
    `done` as `{crashed}`."""
    return f"""
const [{arguments}] = arguments;
(async () => {{
  const lib = await import(`${{service}}/sdk/aim-realtime.js`);
{body}}})().catch((e) => done({{crashed: `${{e}} ${{e.stack}}`}}));
"""
