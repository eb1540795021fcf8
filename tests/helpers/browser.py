"""A page rendered by a real headless Chromium, driven over the DevTools protocol
through --remote-debugging-pipe (fd 3: commands in, fd 4: replies out, each
message JSON ended by a NUL byte): no websocket library needed."""
from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _as_fds_3_and_4(read_end: int, write_end: int) -> None:
    high_r = fcntl.fcntl(read_end, fcntl.F_DUPFD, 10)   # out of the way of 3 and 4 first
    high_w = fcntl.fcntl(write_end, fcntl.F_DUPFD, 10)
    os.dup2(high_r, 3)
    os.dup2(high_w, 4)


class Browser:
    def __init__(self, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.TemporaryDirectory(prefix="futextrace-chromium-")
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        # The child must see the pipes as fds 3 and 4.
        self.proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--user-data-dir={self.profile.name}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=lambda: _as_fds_3_and_4(to_child_r, from_child_w))
        os.close(to_child_r)
        os.close(from_child_w)
        self.buf, self.next_id, self.events = b"", 0, []

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_child], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self.from_child, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_child, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict:
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        while True:
            e = self._read()
            if e.get("method") == method:
                return e
            self.events.append(e)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_child)
        os.close(self.from_child)
        self.profile.cleanup()


def render(url: str, expression: str) -> tuple[object, list[str]]:
    """Load `url`, evaluate `expression` (its JSON-able value) after the load
    event; also every console error, uncaught exception and failed load."""
    b = Browser()
    try:
        target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            b.send(f"{domain}.enable", session=s)
        b.send("Page.navigate", {"url": url}, session=s)
        b.wait_event("Page.loadEventFired")
        value = b.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                       session=s)["result"].get("value")
        errors = []
        for e in b.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif e.get("method") == "Runtime.exceptionThrown":
                errors.append(p.get("exceptionDetails", {}).get("text", "exception"))
            elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append(p["entry"].get("text", "error"))
        return value, errors
    finally:
        b.close()
