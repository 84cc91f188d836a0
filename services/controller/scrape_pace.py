"""When the kafka_exporter view's readers scrape it, learned from their scrapes (ADR 0033).

A refresh of the view asks every leader for the offsets of every partition: at 10,000 partitions,
every 5 s, it was a third of an idle broker's CPU (0.6-1.4 of 2.2-3.2 % a broker), while the
chart's Prometheus reads the view every 30 s and a cluster nobody scrapes reads it never. So a
refresh runs only when a scrape is due before the refresh after it could run: one refresh per
scrape, as fresh at the scrape as a refresh every `refresh.ms` would be, and none while nobody
scrapes.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from typing import Final

__all__ = ["SCRAPES_REMEMBERED", "STOPPED_AFTER_GAPS", "ScrapePace"]

# The shortest gap between the last few scrapes paces the refreshes: two Prometheus replicas
# scraping at an offset alternate short and long gaps, and the short one must find fresh figures.
SCRAPES_REMEMBERED: Final = 4
STOPPED_AFTER_GAPS: Final = 2  # no scrape for this many gaps: the scraper went away, refreshes stop


class ScrapePace:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # Replaced whole by the scrape thread (one assignment, atomic), read whole by the loop.
        self._scrapes: tuple[float, ...] = ()
        self._refreshed_at = -float("inf")  # when the last refresh started: its figures are from then
        self._refresh_took_s = 0.0

    def scraped(self) -> None:
        """A reader took the view (called on the metrics server's thread)."""
        self._scrapes = (*self._scrapes[-SCRAPES_REMEMBERED:], self._clock())

    def refreshed(self, took_s: float) -> None:
        """A refresh that took `took_s` just ended (a scrape while it ran read the figures before it)."""
        self._refreshed_at = self._clock() - took_s
        self._refresh_took_s = took_s

    def refresh_due(self, tick_s: float) -> bool:
        """Whether a refresh should start now, the next chance being `tick_s` from now: a scrape
        is expected before that chance's refresh could end, or one came since the last refresh
        while the pace is not known yet (one scrape; a person's curl). False while nobody scrapes."""
        assert tick_s > 0
        scrapes = self._scrapes
        if not scrapes:
            return False
        now, last = self._clock(), scrapes[-1]
        # Scrapes closer than half a tick are one round (two scrapers side by side), no pace.
        gaps = [later - earlier for earlier, later in itertools.pairwise(scrapes) if later - earlier >= tick_s / 2]
        if not gaps:  # one scrape so far, or scrapes faster than the ticks: each tick after one
            return last >= self._refreshed_at
        gap = min(gaps)
        if now - last > STOPPED_AFTER_GAPS * gap + tick_s:
            return False
        expected = last + gap
        if expected < now:  # a scrape missed its turn: the pace holds for the ones after it
            expected += math.ceil((now - expected) / gap) * gap
        return expected - now <= tick_s + self._refresh_took_s
