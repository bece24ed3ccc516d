"""Headless Chromium driven over the DevTools protocol (aiohttp's websocket client, which
Ray's dashboard dependencies bring): open a page with cookies set, wait for text to
render, collect console errors and uncaught exceptions, take a screenshot. For the pages
of live servers (Ray dashboard, optuna-dashboard, MLflow UI), which a file:// probe
cannot reach."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
]


@dataclass
class PageVisit:
    text: str  # document.body.innerText once the expected text showed
    console_errors: list[str] = field(default_factory=list)
    screenshot: Path | None = None


def visit(
    chromium: str,
    url: str,
    screenshot: Path,
    profile: Path,
    expect: tuple[str, ...] = (),
    cookies: list[dict] = (),
    timeout_s: float = 90,
    size: tuple[int, int] = (1400, 900),
) -> PageVisit:
    """Load `url` in a fresh headless Chromium, wait until every string of `expect` is in
    the page's text, then screenshot it to `screenshot`. A page that does not show them
    within `timeout_s` fails the test with what it showed instead."""
    process = subprocess.Popen(
        [chromium, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         f"--window-size={size[0]},{size[1]}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        endpoint = _devtools_endpoint(process, deadline=time.monotonic() + 60)
        return asyncio.run(_visit(endpoint, url, screenshot, expect, list(cookies), timeout_s, size))
    finally:
        process.kill()
        process.wait()


def _devtools_endpoint(process: subprocess.Popen, deadline: float) -> str:
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        match = re.search(r"DevTools listening on (ws://\S+)", line)
        if match:
            return match.group(1)
        if not line and process.poll() is not None:
            break
    raise RuntimeError("chromium did not start its DevTools endpoint")


async def _visit(endpoint, url, screenshot, expect, cookies, timeout_s, size) -> PageVisit:
    http_base = endpoint.replace("ws://", "http://").split("/devtools/")[0]
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{http_base}/json/list") as response:
            pages = [t for t in await response.json() if t["type"] == "page"]
        async with session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            page = _Page(ws)
            reader = asyncio.create_task(page.read())
            for domain in ("Page", "Runtime", "Log", "Network"):
                await page.call(f"{domain}.enable")
            await page.call("Emulation.setDeviceMetricsOverride", width=size[0], height=size[1], deviceScaleFactor=1, mobile=False)
            for cookie in cookies:
                await page.call("Network.setCookie", **cookie)
            await page.call("Page.navigate", url=url)
            deadline = time.monotonic() + timeout_s
            text = ""
            while True:
                result = await page.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''")
                text = result.get("result", {}).get("value", "") or ""
                if all(item in text for item in expect):
                    break
                if time.monotonic() > deadline:
                    missing = [item for item in expect if item not in text]
                    raise AssertionError(f"{url} did not show {missing} within {timeout_s:.0f} s; it showed:\n{text[:2000]}")
                await asyncio.sleep(1)
            await asyncio.sleep(2)  # let charts finish their transitions
            shot = await page.call("Page.captureScreenshot", format="png")
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            reader.cancel()
            return PageVisit(text=text, console_errors=page.errors, screenshot=screenshot)


class _Page:
    def __init__(self, ws):
        self.ws, self.next_id, self.waiting, self.errors = ws, 0, {}, []

    async def call(self, method: str, **params):
        self.next_id += 1
        future = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = future
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        return await asyncio.wait_for(future, 60)

    async def read(self):
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data:
                self.waiting.pop(data["id"]).set_result(data.get("result", {}))
            elif data.get("method") == "Runtime.exceptionThrown":
                details = data["params"]["exceptionDetails"]
                self.errors.append("uncaught: " + details.get("exception", {}).get("description", details.get("text", "")))
            elif data.get("method") == "Runtime.consoleAPICalled" and data["params"]["type"] == "error":
                self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in data["params"]["args"]))
            elif data.get("method") == "Log.entryAdded" and data["params"]["entry"]["level"] == "error":
                self.errors.append(data["params"]["entry"]["text"])
