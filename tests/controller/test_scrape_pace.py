"""The kafka_exporter view refreshes for its scrapes (controller/scrape_pace.py, ADR 0033): one
refresh per scrape, fresh at the scrape, none while nobody scrapes."""

from __future__ import annotations

import heapq

from tidelog.controller.scrape_pace import ScrapePace

TICK_S = 5.0


class Timeline:
    """A fake clock, a scraper at given times, and the view's loop ticking every TICK_S (its first
    tick at 0.5 s), refreshing when due; records each refresh and the age of what each scrape got."""

    def __init__(self, scrape_times: list[float], refresh_took_s: float = 0.2) -> None:
        self.now = 0.0
        self.pace = ScrapePace(clock=lambda: self.now)
        self.scrape_times = sorted(scrape_times)
        self.refresh_took_s = refresh_took_s
        self.refreshes: list[float] = []
        self.ages: list[float] = []  # what each scrape got: seconds since its data was refreshed

    def run(self, until: float) -> None:
        events = [(t, "scrape") for t in self.scrape_times if t < until]
        tick = 0.5
        while tick < until:
            events.append((tick, "tick"))
            tick += TICK_S
        heapq.heapify(events)
        while events:
            at, kind = heapq.heappop(events)
            self.now = at
            if kind == "tick":
                if self.pace.refresh_due(TICK_S):
                    self.refreshes.append(at)
                    heapq.heappush(events, (at + self.refresh_took_s, "done"))
            elif kind == "done":  # a scrape while it ran read the figures before it
                self.pace.refreshed(self.refresh_took_s)
            else:
                ready = [r for r in self.refreshes if r + self.refresh_took_s <= at]
                self.ages.append(at - ready[-1] if ready else float("inf"))
                self.pace.scraped()


def test_nobody_scraping_means_no_refresh() -> None:
    timeline = Timeline([])
    timeline.run(until=300)
    assert timeline.refreshes == []


def test_a_thirty_second_scrape_gets_one_refresh_each_as_fresh_as_a_five_second_schedule() -> None:
    scrapes = [7.0 + 30 * n for n in range(20)]
    timeline = Timeline(scrapes)
    timeline.run(until=600)
    # The first two scrapes teach the pace (a refresh after the first); then one refresh per scrape.
    after_pace = [r for r in timeline.refreshes if r > scrapes[1]]
    later_scrapes = [s for s in scrapes if s > scrapes[2]]
    assert len(after_pace) == len(later_scrapes) + 1  # (the one for the scrape past the end)
    # Every scrape once the pace is known found figures at most a tick (and a refresh) old.
    assert all(age <= TICK_S + 0.2 for age in timeline.ages[3:]), timeline.ages
    # A fixed 5 s schedule would have refreshed 120 times over the same 600 s.
    assert len(timeline.refreshes) <= 25


def test_scrapes_faster_than_the_ticks_refresh_every_tick() -> None:
    timeline = Timeline([1.0 * n for n in range(1, 300)])
    timeline.run(until=300)
    assert len(timeline.refreshes) >= 59  # every tick from the first scrape on
    assert max(timeline.ages[10:]) <= TICK_S + 0.2


def test_two_scrapers_side_by_side_pace_like_one() -> None:
    scrapes = [t for n in range(20) for t in (7.0 + 30 * n, 7.05 + 30 * n)]
    timeline = Timeline(scrapes)
    timeline.run(until=600)
    assert len(timeline.refreshes) <= 25
    assert all(age <= TICK_S + 0.2 for age in timeline.ages[6:]), timeline.ages


def test_refreshes_stop_when_the_scraper_goes_away_and_resume_with_it() -> None:
    scrapes = [7.0 + 30 * n for n in range(5)] + [607.0 + 30 * n for n in range(5)]
    timeline = Timeline(scrapes)
    timeline.run(until=750)
    idle = [r for r in timeline.refreshes if 200 < r < 600]
    assert idle == []  # gone after two missed scrapes
    assert any(r > 607 for r in timeline.refreshes)  # back with the first scrape after
    assert timeline.ages[-1] <= TICK_S + 0.2


def test_one_scrape_gets_one_refresh() -> None:
    """A person's curl: the next tick refreshes once, then nothing more is asked of the leaders."""
    timeline = Timeline([12.0])
    timeline.run(until=120)
    assert timeline.refreshes == [15.5]


def test_a_scrape_during_a_refresh_read_the_figures_before_it_and_gets_the_next_one() -> None:
    now = [10.0]
    pace = ScrapePace(clock=lambda: now[0])
    now[0] = 10.05
    pace.scraped()  # while a refresh that started at 10.0 runs
    now[0] = 10.2
    pace.refreshed(0.2)
    assert pace.refresh_due(TICK_S)
    now[0] = 15.2
    pace.refreshed(0.1)
    assert not pace.refresh_due(TICK_S)
