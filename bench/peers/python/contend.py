"""redis-py's Lock taking turns on one key: the Python peer of the benchmark's row 11.

Run by bench/src/contention.rs with the same environment as distlock's and rslock's helper
processes; prints one `asked granted released` line (ns since the epoch) per acquisition.
redis-py's Lock is the single-instance pattern (SET NX PX, a Lua compare-and-delete) and
waits by polling: `blocking=True` retries every `sleep` seconds (0.1 by default).
"""

import os
import threading
import time

import redis


def main() -> None:
    url = os.environ["BENCH_URL"]
    key = os.environ["BENCH_KEY"]
    tasks = int(os.environ["BENCH_TASKS"])
    start = int(os.environ["BENCH_START_NS"])
    end = start + int(os.environ["BENCH_WINDOW_MS"]) * 1_000_000
    hold = int(os.environ["BENCH_HOLD_US"]) / 1e6
    client = redis.Redis.from_url(url)
    turns = []
    guard = threading.Lock()

    def run() -> None:
        mine = []
        time.sleep(max(0, start - time.time_ns()) / 1e9)
        while time.time_ns() < end:
            lock = client.lock(key, timeout=30)
            asked = time.time_ns()
            lock.acquire(blocking=True)
            granted = time.time_ns()
            if hold > 0:
                time.sleep(hold)
            released = time.time_ns()
            lock.release()
            mine.append((asked, granted, released))
        with guard:
            turns.extend(mine)

    threads = [threading.Thread(target=run) for _ in range(tasks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("\n".join(f"{a} {g} {r}" for a, g, r in turns))


if __name__ == "__main__":
    main()
