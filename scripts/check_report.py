"""Render an aether-context HTML report in headless Chromium; fail on any JavaScript error.

Drives Chromium over the DevTools protocol (the `websockets` package, already installed with ADK):
loads the report from file://, collects uncaught exceptions and console errors, exercises it (hover,
click a bar, open a call, switch the session filter), checks the plots and the table were drawn,
and optionally saves a screenshot.

    python scripts/check_report.py report.html [--screenshot .aether/report/report.png] [--chromium /usr/bin/chromium]

Exit code 0: rendered without errors; 1: a JavaScript error or a missing plot; 2: no Chromium.
Chromium on Debian: `apt-get install -y chromium`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import websockets

EXERCISE = """(() => {
  const out = {rendered: document.body.dataset.rendered, bars: document.querySelectorAll('#tokens rect').length,
               cache: document.querySelectorAll('#cache rect').length, rows: document.querySelectorAll('#rows tr.call').length};
  const fire = (el, type) => el && el.dispatchEvent(new MouseEvent(type, {bubbles: true, clientX: 200, clientY: 200}));
  document.querySelectorAll('#tokens .bar, #tokens .hit, #cache .bar, #failures .bar').forEach(el => { fire(el, 'mousemove'); fire(el, 'mouseleave'); });
  fire(document.querySelector('#tokens .bar'), 'click');
  out.detail_after_bar = document.querySelectorAll('#rows tr.detail').length;
  const rows = document.querySelectorAll('#rows tr.call');
  fire(rows[rows.length - 1], 'click');
  out.detail_after_row = document.querySelectorAll('#rows tr.detail').length;
  const box = document.querySelector('#legend input'); if (box) { box.click(); box.click(); }
  const sel = document.getElementById('session');
  if (sel.options.length > 1) { sel.value = sel.options[1].value; sel.dispatchEvent(new Event('change')); sel.value = ''; sel.dispatchEvent(new Event('change')); }
  out.rows_after_filter = document.querySelectorAll('#rows tr.call').length;
  return JSON.stringify(out);
})()"""


class Page:
    def __init__(self, ws):
        self.ws, self.next_id, self.errors, self.events = ws, 0, [], {}

    async def send(self, method: str, **params):
        self.next_id += 1
        my_id = self.next_id
        await self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def _event(self, msg: dict) -> None:
        method, params = msg.get("method", ""), msg.get("params", {})
        self.events[method] = self.events.get(method, 0) + 1
        if method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            self.errors.append(f"uncaught: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(f"log: {params['entry'].get('text')}")

    async def wait_for(self, method: str, timeout: float = 20.0) -> None:
        async def loop():
            while not self.events.get(method):
                self._event(json.loads(await self.ws.recv()))
        await asyncio.wait_for(loop(), timeout)


async def _drive(page: Page, report: Path, screenshot: Path | None) -> list[str]:
    """Load the report, exercise it, check what it drew; the page's errors."""
    await page.send("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
    await page.send("Page.navigate", url=report.resolve().as_uri())
    await page.wait_for("Page.loadEventFired")
    result = await page.send("Runtime.evaluate", expression=EXERCISE, returnByValue=True)
    if "exceptionDetails" in result:
        page.errors.append(f"exercise: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return page.errors
    facts = json.loads(result["result"]["value"])
    print("rendered:", facts)
    n = int(facts.get("rendered") or -1)
    if n <= 0 or facts["bars"] == 0 or facts["rows"] != n or facts["rows_after_filter"] != n:
        page.errors.append(f"the report did not draw its plots and table: {facts}")
    if facts["detail_after_bar"] != 1 or facts["detail_after_row"] != 1:
        page.errors.append(f"clicking a bar or a row did not open one call: {facts}")
    if screenshot:
        await page.send("Runtime.evaluate", expression=(  # the last call open: usually the most eventful
            "(() => { const rows = document.querySelectorAll('#rows tr.call');"
            " if (!document.querySelector('#rows tr.open') && rows.length) rows[rows.length - 1].click();"
            " window.scrollTo(0, 0); })()"))
        height = (await page.send("Runtime.evaluate", expression="document.body.scrollHeight", returnByValue=True))["result"]["value"]
        await page.send("Emulation.setDeviceMetricsOverride", width=1280, height=min(int(height) + 40, 2400),
                        deviceScaleFactor=1, mobile=False)
        shot = await page.send("Page.captureScreenshot", format="png")
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        print(f"screenshot: {screenshot}")
    await asyncio.sleep(0.2)  # late errors from the exercise
    return page.errors


def _find_chromium(given: str | None) -> str | None:
    for name in ([given] if given else ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]):
        path = shutil.which(name) if name else None
        if path:
            return path
    return None


@contextlib.asynccontextmanager
async def browser_page(chromium: str | None = None):
    """A `Page` in a fresh headless Chromium (its own profile, removed after). FileNotFoundError without Chromium."""
    binary = _find_chromium(chromium)
    if binary is None:
        raise FileNotFoundError("no Chromium found (apt-get install -y chromium)")
    # Chromium's helper processes may still write the profile after it exits: its removal must not fail the check
    with tempfile.TemporaryDirectory(prefix="aether-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen([binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                 "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            browser_ws = None
            for _ in range(200):
                line = await asyncio.to_thread(proc.stderr.readline)
                found = re.search(r"DevTools listening on (ws://\S+)", line or "")
                if found:
                    browser_ws = found.group(1)
                    break
                if not line and proc.poll() is not None:
                    break
            if browser_ws is None:
                raise RuntimeError("Chromium did not start its DevTools endpoint")
            async with websockets.connect(browser_ws) as ws:
                await ws.send(json.dumps({"id": 1, "method": "Target.createTarget", "params": {"url": "about:blank"}}))
                target = None
                while target is None:
                    msg = json.loads(await ws.recv())
                    if msg.get("id") == 1:
                        target = msg["result"]["targetId"]
            page_ws = browser_ws.split("/devtools/")[0] + f"/devtools/page/{target}"
            async with websockets.connect(page_ws, max_size=64 * 2**20) as ws:
                page = Page(ws)
                for domain in ("Runtime", "Log", "Page"):
                    await page.send(f"{domain}.enable")
                yield page
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def check(report: Path, screenshot: Path | None = None, chromium: str | None = None) -> list[str]:
    """Errors found while rendering `report` (empty: it rendered cleanly). Raises FileNotFoundError without Chromium."""
    async with browser_page(chromium) as page:
        return await _drive(page, report, screenshot)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the HTML report to render")
    parser.add_argument("--screenshot", type=Path, help="save a PNG of the rendered report here")
    parser.add_argument("--chromium", help="the Chromium binary (default: found on PATH)")
    args = parser.parse_args()
    try:
        errors = asyncio.run(check(args.report, args.screenshot, args.chromium))
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    for e in errors:
        print("ERROR", e, file=sys.stderr)
    print("ok: no JavaScript errors" if not errors else f"{len(errors)} error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
