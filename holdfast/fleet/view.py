"""What ``holdfast up`` shows: a rich live view on a terminal, plain timestamped lines otherwise.

Both take the same calls: ``line`` for an event, ``refresh`` with the current state. The plain
view never redraws or waits for input, so it is safe in CI, a pipe or with no stdin.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from holdfast.fleet.observer import StreamView

__all__ = ["LiveView", "PlainView", "Snapshot", "View", "make_view"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a view draws at one moment."""

    t: float
    workers: dict[str, str]  # worker id -> "running" / "stopping" / "exited 0" ...
    loads: dict[str, int]
    streams: list[StreamView]
    title: str
    after_stop: bool = False  # the last scan, once every worker was stopped


class View(Protocol):
    def line(self, t: float, text: str, style: str = "") -> None: ...
    def refresh(self, snap: Snapshot) -> None: ...
    def close(self) -> None: ...


def _stamp(t: float) -> str:
    return f"{time.strftime('%H:%M:%S')} +{t:6.2f}s"


class PlainView:
    """Timestamped lines; a fleet status line every ``every_s`` seconds."""

    def __init__(self, console: Console, every_s: float = 5.0) -> None:
        self.console = console
        self.every_s = every_s
        self._last = -1e9

    def line(self, t: float, text: str, style: str = "") -> None:
        # ``text`` is plain: an error or a log line may hold "[/]" (markup raised on it) or
        # "[local]" (markup ate it); the style is the only markup.
        self.console.print(f"{_stamp(t)} {escape(text)}", style=style or None,
                           highlight=False, soft_wrap=True)

    def refresh(self, snap: Snapshot) -> None:
        if snap.t - self._last < self.every_s and not snap.after_stop:
            return
        self._last = snap.t
        started = [s for s in snap.streams if s.desired_state == "STARTED"]
        owned = sum(1 for s in started if s.owner)
        loads = " ".join(f"{w}={snap.loads.get(w, 0)}({state})"
                         for w, state in snap.workers.items())
        rate = sum(s.rate for s in snap.streams)
        if snap.after_stop:
            # Said so: "0/12 started streams owned" just before PASS read like a failure, when
            # each was released with its final checkpoint by its stopping worker.
            self.line(snap.t, f"status after the stop: {owned}/{len(started)} started streams "
                      f"still owned; workers {loads}")
            return
        self.line(snap.t, f"status: {owned}/{len(started)} started streams owned; workers "
                  f"{loads or 'none'}; ~{rate:.0f} msgs/s checkpointed")

    def close(self) -> None:
        pass


class LiveView:
    """A rich ``Live`` panel: workers, streams and the last events."""

    def __init__(self, console: Console, log_lines: int = 12) -> None:
        self.console = console
        self.events: deque[str] = deque(maxlen=log_lines)
        self.live = Live(Text("starting..."), console=console, refresh_per_second=4,
                         transient=False)
        self.live.start()

    def line(self, t: float, text: str, style: str = "") -> None:
        text = escape(text)  # plain, as ``PlainView.line``'s
        self.events.append(f"[{style}]{_stamp(t)} {text}[/]" if style else
                           f"{_stamp(t)} {text}")

    def refresh(self, snap: Snapshot) -> None:
        workers = Table("worker", "state", "connections", title="workers",
                        title_justify="left", header_style="bold")
        for w, state in snap.workers.items():
            color = "green" if state == "running" else "yellow" if "stop" in state else "red"
            workers.add_row(w, f"[{color}]{state}[/]", str(snap.loads.get(w, 0)))
        streams = Table("stream", "state", "owner", "last_seq", "checkpointed/s", "session left",
                        title="streams", title_justify="left", header_style="bold")
        for s in sorted(snap.streams, key=lambda v: v.conn_id):
            owner = s.owner or ("[red]unowned[/]" if s.desired_state == "STARTED" else "-")
            streams.add_row(s.conn_id, s.desired_state, owner,
                            "-" if s.last_seq is None else str(s.last_seq), f"{s.rate:.1f}",
                            "-" if s.lease_left_ms is None else f"{s.lease_left_ms / 1000:.1f}s")
        log = Text.from_markup("\n".join(self.events) or "(no events yet)")
        self.live.update(Group(Text.from_markup(f"[bold]{snap.title}[/]  +{snap.t:.1f}s"),
                               workers, streams, Text("events", style="bold"), log))

    def close(self) -> None:
        self.live.stop()


def make_view(console: Console, live: bool) -> View:
    return LiveView(console) if live else PlainView(console)
