"""Reading a broker's Prometheus endpoint the way a Prometheus server does: over HTTP, the
text exposition parsed by prometheus_client's parser (for tests and benchmarks).

:func:`scrape` returns a :class:`Scrape`: every sample by name and labels. Looking up a
series that is not there fails with the series of that name that are (or, when the name is
absent, the names that are), so a failing assertion shows the difference.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Scrape", "parse", "scrape"]

_TIMEOUT_S = 10.0

Labels = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class Scrape:
    """One scrape's samples: ``{sample name: {labels: value}}`` and the text they came from."""

    samples: Mapping[str, Mapping[Labels, float]]
    text: str

    def value(self, name: str, **labels: str) -> float:
        """The sample ``name`` with exactly ``labels``; AssertionError naming what exists otherwise."""
        found = self.get(name, **labels)
        if found is None:
            series = self.samples.get(name)
            if series is None:
                raise AssertionError(f"no sample named {name}; the scrape has {sorted(self.samples)}")
            shown = (
                [dict(sorted(k)) for k in sorted(series, key=sorted)] if len(series) < 50 else f"{len(series)} series"
            )
            raise AssertionError(f"no sample {name}{labels}; {name} has labels {shown}")
        return found

    def get(self, name: str, **labels: str) -> float | None:
        """The sample ``name`` with exactly ``labels``, or None."""
        return self.samples.get(name, {}).get(frozenset(labels.items()))

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples ``name`` whose labels include ``labels`` (0 when none do)."""
        wanted = labels.items()
        return sum(value for have, value in self.samples.get(name, {}).items() if wanted <= have)

    def series(self, name: str) -> dict[Labels, float]:
        """Every sample named ``name``, by labels."""
        return dict(self.samples.get(name, {}))


def parse(text: str) -> Scrape:
    """A :class:`Scrape` of Prometheus text exposition ``text``."""
    samples: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[frozenset(sample.labels.items())] = float(sample.value)
    return Scrape(samples, text)


def scrape(url: str, timeout_s: float = _TIMEOUT_S) -> Scrape:
    """GET ``url`` (a broker's ``http://host:port/metrics``) and parse it."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        status = response.status
        body = response.read().decode("utf-8")
    if status != 200:
        raise AssertionError(f"GET {url} answered HTTP {status}: {body[:500]}")
    return parse(body)
