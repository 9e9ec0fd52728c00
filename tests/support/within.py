"""`within`: a call that must end by itself, run in a thread so a blocking read fails the test instead of hanging it."""

from __future__ import annotations

import threading


def within(seconds: float, fn, *args, **kwargs):
    """fn(*args, **kwargs) in a thread; what it returned or raised, or a failure when it still runs after `seconds`
    (a read of a FIFO that blocks, of /dev/zero that never ends, of a socket that trickles)."""
    box: dict = {}

    def call():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} still ran after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")
