"""Headless Debian chromium driven over the DevTools protocol (``websockets``), for UI tests.

``chromium --dump-dom --virtual-time-budget`` never returns on a page that keeps a long poll open
(the Temporal UI's page of a running workflow): virtual time stops while a request is pending. Here
the page is loaded for real, ``document.body.innerText`` is polled until the expected text shows
(or the timeout), and a screenshot is taken with ``Page.captureScreenshot``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TEXT_JS = """(() => {
  const texts = [document.body ? document.body.innerText : ''];
  for (const f of document.querySelectorAll('iframe')) {  // the UI renders Markdown in a same-origin iframe
    try { texts.push(f.contentDocument.body.innerText); } catch (e) { texts.push(''); }
  }
  return texts.join('\\n');
})()"""
"""The page's visible text, iframes included."""
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-dev-shm-usage",
         "--window-size=1440,2400", "--remote-debugging-port=0", "--remote-allow-origins=*"]


class Browser:
    """``async with Browser(profile_dir) as b: text = await b.open(url, wait_for=[...], shot=path)``."""

    def __init__(self, profile: Path) -> None:
        self.profile = profile
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0
        self._id = 0

    async def __aenter__(self) -> Browser:
        assert CHROMIUM, "chromium not installed"
        self.proc = await asyncio.create_subprocess_exec(
            CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        assert self.proc.stderr is not None
        while True:
            line = (await asyncio.wait_for(self.proc.stderr.readline(), 30)).decode(errors="replace")
            if not line:
                raise RuntimeError("chromium exited before DevTools listened")
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                self.port = int(m.group(1))
                break
        asyncio.get_running_loop().create_task(self._drain())
        return self

    async def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while await self.proc.stderr.readline():
            pass

    async def __aexit__(self, *exc: object) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()

    def _page_ws(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        return pages[0]["webSocketDebuggerUrl"]

    async def open(self, url: str, wait_for: Iterable[str], shot: Path, timeout_s: float = 30.0,
                   ready: Iterable[str] = (), js: str | None = None) -> str:
        """Navigate, wait until every string of ``wait_for`` is in the page's visible text (or the
        timeout), let it settle, save a PNG screenshot to ``shot``; return the visible text.
        ``js``: run once the strings of ``ready`` show (e.g. click a refresh button), then wait on."""
        import websockets

        want = list(wait_for)
        pending_js = js
        ready_l = list(ready)
        async with websockets.connect(self._page_ws(), max_size=64 * 1024 * 1024) as ws:
            async def call(method: str, **params: Any) -> dict:
                self._id += 1
                mid = self._id
                await ws.send(json.dumps({"id": mid, "method": method, "params": params}))
                while True:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), timeout_s))
                    if msg.get("id") == mid:
                        if "error" in msg:
                            raise RuntimeError(f"{method}: {msg['error']}")
                        return msg.get("result", {})

            await call("Page.enable")
            await call("Page.navigate", url=url)
            text = ""
            loop = asyncio.get_running_loop()
            end = loop.time() + timeout_s
            while loop.time() < end:
                r = await call("Runtime.evaluate", expression=TEXT_JS,
                               returnByValue=True)
                text = r.get("result", {}).get("value") or ""
                if pending_js and all(w in text for w in ready_l):
                    await call("Runtime.evaluate", expression=pending_js)
                    pending_js = None
                elif not pending_js and all(w in text for w in want):
                    break
                await asyncio.sleep(0.5)
            await asyncio.sleep(1.0)  # fonts, layout
            r = await call("Runtime.evaluate", expression=TEXT_JS,
                           returnByValue=True)
            text = r.get("result", {}).get("value") or text
            png = await call("Page.captureScreenshot", format="png", captureBeyondViewport=False)
            shot.write_bytes(base64.b64decode(png["data"]))
            return text
