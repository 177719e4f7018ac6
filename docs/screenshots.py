"""Take the dashboard's screenshots in docs/images/ (docs/dashboard.md shows them).

    python docs/screenshots.py

It starts a private server in a temporary folder, fills it with a small shop's queues (two
runners at work, tasks waiting and scheduled, charges that died), gives the counters the
hour before as a busy shop's would be (written in the wire format of docs/wire-format.md,
"Counters": a screenshot cannot wait an hour), serves the dashboard and photographs its
pages in Debian's Chromium (/usr/bin/chromium) through Playwright. Nothing outside the
temporary folder is touched. The overview is photographed twice: 1200 px wide, and 420
px as a phone shows it.
"""

from __future__ import annotations

import asyncio
import math
import random
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import redis
import uvicorn
from playwright.sync_api import Page, sync_playwright

import culex
from culex import config
from culex.operations import inspection
from culex._redis.keys import queue_keys
from culex.dashboard import app
from culex.server.embedded import EmbeddedServer

IMAGES = Path(__file__).resolve().parent / "images"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
busy = threading.Event()


class SendEmailJob(culex.QueuedJob):
    to: str
    template: str = "welcome"

    def perform(self) -> None:
        busy.wait(600)


class ResizeImageJob(culex.QueuedJob):
    path: str
    width: int

    def perform(self) -> None:
        busy.wait(600)


class ChargeCardJob(culex.QueuedJob):
    order: int
    cents: int
    max_retries = 0

    def perform(self) -> None:
        raise ConnectionError(f"payment gateway timed out for order {self.order}")


class SyncStockJob(culex.QueuedJob):
    sku: str
    max_retries = 5

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(minutes=10 * retry_count)

    def perform(self) -> None:
        raise ConnectionRefusedError(f"warehouse API refused {self.sku}")


def fill() -> None:
    """The shop's day: waiting and scheduled tasks, charges that died, stock syncs waiting
    out a retry beside delayed ones, and two reminders called off."""
    rng = random.Random(7)
    culex.enqueue_many(SendEmailJob(to=f"user{i}@example.com") for i in range(140))
    culex.enqueue_many(
        (SendEmailJob(to=f"user{i}@example.com", template="reminder") for i in range(36)),
        delay=3600,
    )
    culex.enqueue_many(
        ResizeImageJob(path=f"uploads/{i:05d}.jpg", width=rng.choice([320, 640, 1280]))
        for i in range(57)
    )
    culex.enqueue_many(
        ChargeCardJob(order=1000 + i, cents=rng.randint(500, 9000)) for i in range(9)
    )
    culex.enqueue_many(SyncStockJob(sku=f"SKU-{i:04d}") for i in range(4))
    culex.enqueue_many((SyncStockJob(sku=f"SKU-{i:04d}") for i in range(4, 7)), delay=1800)
    for task in culex.enqueue_many(
        (SendEmailJob(to=f"gone{i}@example.com", template="reminder") for i in range(2)),
        delay=7200,
    ):
        task.cancel("customer unsubscribed")


def past_hour(url: str) -> None:
    """An hour of minutes in the counters, before now: mail in waves, images steady, a
    bad quarter of an hour for the payment gateway."""
    client = redis.Redis.from_url(url)
    now = int(client.time()[0]) // 60 * 60
    rng = random.Random(11)
    for ago in range(1, 61):
        start = now - 60 * ago
        mail = int(220 + 160 * math.sin(ago / 6) + rng.randint(0, 40))
        images = 90 + rng.randint(0, 25)
        gateway_down = 20 <= ago <= 34
        failed = rng.randint(8, 30) if gateway_down else rng.randint(0, 3)
        fields = {
            (("send_email_job", "SendEmailJob"), "s3"): mail,
            (("resize_image_job", "ResizeImageJob"), "s6"): images,
            (("charge_card_job", "ChargeCardJob"), "s5"): 40 + rng.randint(0, 10),
            (("charge_card_job", "ChargeCardJob"), "f"): failed,
            (("charge_card_job", "ChargeCardJob"), "d"): failed // 4,
        }
        pipe = client.pipeline(transaction=False)
        for ((queue, job), field), count in fields.items():
            key = queue_keys("culex", queue).stats_minute(start)
            pipe.hincrby(key, f"{job}|{field}", count)
            pipe.expire(key, 3 * 86400)
        pipe.execute()
    client.close()


@contextmanager
def runners() -> Iterator[None]:
    """Two runners at work, each on a thread of its own: one on mail and images (its
    tasks take a while), one on charges (they fail)."""
    workers = [
        culex.Runner(run_from=["send_email_job", "resize_image_job"], concurrency=4),
        culex.Runner(run_from=["charge_card_job", "sync_stock_job"], concurrency=2),
    ]
    loops = [asyncio.new_event_loop() for _ in workers]
    threads = [
        threading.Thread(target=loop.run_until_complete, args=(worker.arun(),))
        for loop, worker in zip(loops, workers, strict=True)
    ]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            counts = inspection.queue_counts()
            running = [t for r in inspection.runners() for t in r["tasks"]]
            retrying = counts.get("sync_stock_job", {}).get("scheduled") == 7
            if (
                counts.get("charge_card_job", {}).get("dead") == 9
                and len(running) >= 4
                and retrying
            ):
                break
            time.sleep(0.2)
        yield
    finally:
        busy.set()
        for loop, worker in zip(loops, workers, strict=True):
            loop.call_soon_threadsafe(worker.stop)
        for thread in threads:
            thread.join(60)


@contextmanager
def served() -> Iterator[str]:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app(), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


def shoot(page: Page, url: str, name: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    if page.locator("#chart").count():
        page.wait_for_selector("#chart canvas")
    # (a traceback names this machine's folders: its attempt is shown closed)
    page.evaluate("() => document.querySelectorAll('#errors details').forEach(d => d.open = false)")
    page.screenshot(path=IMAGES / name, full_page=True)
    print(f"docs/images/{name}")


def main() -> int:
    IMAGES.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="culex-shots-") as folder:
        server = EmbeddedServer(Path(folder))
        culex.configure(redis_url=server.ensure_running(), lease=2)
        try:
            fill()
            past_hour(config.settings().redis_url or "")
            with runners(), served() as base, sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1200, "height": 760})
                dead = culex.dead_tasks("charge_card_job", 1)[0]
                shoot(page, base, "overview.png")
                shoot(page, f"{base}/queue?queue=charge_card_job&state=dead", "queue.png")
                shoot(page, f"{base}/task?queue=charge_card_job&id={dead.id}", "task.png")
                shoot(page, f"{base}/runners", "runners.png")
                shoot(page, f"{base}/dead", "dead.png")
                shoot(page, f"{base}/queue?queue=sync_stock_job&state=scheduled", "scheduled.png")
                shoot(page, f"{base}/queue?queue=charge_card_job&state=dead&q=order+1003",
                      "search.png")  # fmt: skip
                page.goto(f"{base}/queue?queue=charge_card_job&state=dead")
                page.get_by_label("action").select_option("delete")
                page.get_by_role("button", name="on every matching task").click()
                page.locator("#confirm-dialog").wait_for()
                page.screenshot(path=IMAGES / "confirm.png")
                print("docs/images/confirm.png")
                phone = browser.new_page(viewport={"width": 420, "height": 800})
                shoot(phone, base, "overview-420.png")
                browser.close()
        finally:
            server.stop()
            config.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
