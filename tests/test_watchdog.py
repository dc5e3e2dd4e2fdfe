"""The shared watchdog: a block past its deadline is interrupted once; a finished one never is."""

import threading
import time

from tracegym.synth_envs.watchdog import Watchdog


def test_a_block_past_its_deadline_is_interrupted_once_and_a_quick_one_never() -> None:
    watchdog = Watchdog()
    calls: list[str] = []
    with watchdog.guard(lambda: calls.append("slow"), 0.05):
        time.sleep(0.3)
    with watchdog.guard(lambda: calls.append("quick"), 0.05):
        pass
    time.sleep(0.2)
    assert calls == ["slow"]


def test_concurrent_guards_each_get_their_own_deadline() -> None:
    watchdog = Watchdog()
    interrupted: list[str] = []

    def work(name: str, timeout_s: float, seconds: float) -> None:
        with watchdog.guard(lambda: interrupted.append(name), timeout_s):
            time.sleep(seconds)

    threads = [
        threading.Thread(target=work, args=args)
        for args in (("long-limit", 5.0, 0.2), ("short-limit", 0.05, 0.3), ("later-short", 0.1, 0.4))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(interrupted) == ["later-short", "short-limit"]
