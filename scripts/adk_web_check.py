"""Show that a packed call is visible in `adk web`: serve an agent with the plugin, run a turn, open ADK's dev UI
in headless Chromium, select the model's answer and read its event JSON.

Runs `adk web --extra_plugins aether_context.ContextPackPlugin` on 127.0.0.1 (a free port) over a scripted
agent in a temporary folder, with AETHER_CONTEXT_STORE pointing there; fails unless the event view shows
`customMetadata.aether_context` with the pack id that the /run response carried.

    python scripts/adk_web_check.py [--screenshot docs/adk-web-event.png]

Exit code 0: shown; 1: not shown; 2: no Chromium.
Debian: `apt-get install -y chromium fonts-material-design-icons-iconfont` (the font: icons instead of their names).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_report import browser_page  # noqa: E402

AGENT = textwrap.dedent('''
    from google.adk.agents import LlmAgent
    from aether_context.testing import ScriptedLlm, call

    def lookup(key: str) -> dict:
        """Look a key up."""
        return {"key": key, "value": "v-" + key * 50}

    root_agent = LlmAgent(name="helper", instruction="Answer with the lookup tool.", tools=[lookup],
                          model=ScriptedLlm(model="gemini-2.5-flash", turns=[call("lookup", key="k"), "done: v-k"]))
''')

SELECT = """(() => {
  const no = [...document.querySelectorAll('button')].find(b => /No Thanks/.test(b.innerText)); if (no) no.click();
  const answer = [...document.querySelectorAll('*')].filter(e => e.children.length === 0 && /done: v-k/.test(e.textContent));
  answer.forEach(e => e.click());
  return answer.length;
})()"""
RAW_TAB = """(() => {
  const tabs = [...document.querySelectorAll('mat-icon, button, [role=tab]')].filter(e => e.innerText.trim() === 'data_object');
  tabs.forEach(e => (e.closest('[role=tab],button') || e).click());
  return tabs.length;
})()"""


def _post(url: str, body: dict | None = None) -> object:
    request = urllib.request.Request(url, data=json.dumps(body or {}).encode(), method="POST",
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(base: str, server: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if server.poll() is not None:
            raise RuntimeError("adk web exited early")
        try:
            urllib.request.urlopen(base + "/list-apps", timeout=2).read()
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("adk web did not start in time")


# adk web loads its icon fonts from Google Fonts; offline its icons show as their names. Debian's
# fonts-material-design-icons-iconfont has the same ligatures: given to the page, the screenshot shows icons.
ICON_FONT = Path("/usr/share/fonts/woff/material-design-icons-iconfont/MaterialIcons-Regular.woff2")


async def _local_icons(page) -> None:
    if not ICON_FONT.exists():
        return
    url = "data:font/woff2;base64," + base64.b64encode(ICON_FONT.read_bytes()).decode()
    css = "".join(f"@font-face{{font-family:'{family}';src:url({url}) format('woff2');}}"
                  for family in ("Material Icons", "Material Symbols Outlined"))
    await page.send("Runtime.evaluate", expression=(
        f"(() => {{ const s = document.createElement('style'); s.textContent = {json.dumps(css)};"
        " document.head.appendChild(s); })()"))


async def _look(base: str, session: str, screenshot: Path | None) -> str:
    async with browser_page() as page:
        await page.send("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)
        await page.send("Page.navigate", url=f"{base}/dev-ui/?app=packed_app&session={session}")
        await page.wait_for("Page.loadEventFired")
        await _local_icons(page)
        text = ""
        for _ in range(30):  # the UI loads the session after the page
            await asyncio.sleep(1)
            found = await page.send("Runtime.evaluate", expression=SELECT, returnByValue=True)
            if found["result"].get("value"):
                await asyncio.sleep(1)
                await page.send("Runtime.evaluate", expression=RAW_TAB, returnByValue=True)
                await asyncio.sleep(1)
                text = (await page.send("Runtime.evaluate", expression="document.body.innerText",
                                        returnByValue=True))["result"]["value"]
                break
        if screenshot:
            shot = await page.send("Page.captureScreenshot", format="png")
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            print(f"screenshot: {screenshot}")
        return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screenshot", type=Path, help="save a PNG of the event view here")
    args = parser.parse_args()
    adk = Path(sys.executable).with_name("adk")
    with tempfile.TemporaryDirectory(prefix="aether-adk-web-") as root:
        agents = Path(root) / "agents" / "packed_app"
        agents.mkdir(parents=True)
        (agents / "__init__.py").write_text("from . import agent\n")
        (agents / "agent.py").write_text(AGENT)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        env = {**os.environ, "AETHER_CONTEXT_STORE": f"{root}/packs", "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
        server = subprocess.Popen([str(adk), "web", "--host", "127.0.0.1", "--port", str(port),
                                   "--extra_plugins", "aether_context.ContextPackPlugin", str(Path(root) / "agents")],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_until_up(base, server)
            session = _post(f"{base}/apps/packed_app/users/user/sessions")["id"]
            events = _post(f"{base}/run", {"app_name": "packed_app", "user_id": "user", "session_id": session,
                                           "new_message": {"role": "user", "parts": [{"text": "what is k?"}]}})
            pack_id = events[-1]["customMetadata"]["aether_context"]["pack_id"]
            print(f"/run: the answer's event carries pack {pack_id}")
            try:
                text = asyncio.run(_look(base, session, args.screenshot))
            except FileNotFoundError as e:
                print(e, file=sys.stderr)
                return 2
        finally:
            server.terminate()
            server.wait(timeout=30)
    shown = "aether_context" in text and pack_id in text
    print("adk web shows customMetadata.aether_context with that pack id" if shown else "NOT shown in adk web's event view")
    return 0 if shown else 1


if __name__ == "__main__":
    sys.exit(main())
