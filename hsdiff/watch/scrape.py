"""Reading an engine's Prometheus metrics: one URL, fetched with bounded retries, parsed with
prometheus-client's own text parser, reduced to the series :mod:`hsdiff.rules.metrics` names.

Only the URL given is contacted: redirects are refused and proxies from the environment are not used.

>>> text = '''# TYPE vllm:spec_decode_num_drafts counter
... vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 120.0
... # TYPE vllm:spec_decode_num_accepted_tokens counter
... vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 24.0
... '''
>>> s = parse_metrics(text)
>>> s.engine, s.totals["drafts"], s.totals["accepted"]
('vllm', 120.0, 24.0)
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import InputError
from ..extras import needs
from ..rules.metrics import MEAN, SERIES, SPEC_TOKENS, WATCH_INFO, Series

__all__ = ["Sample", "MetricsError", "MissingMetricsError", "fetch", "parse_metrics", "server_of", "MAX_BYTES"]

log = logging.getLogger(__name__)

#: Largest metrics page read (bytes): a scrape is text of a few hundred KB at most.
MAX_BYTES = 16 << 20


class MetricsError(InputError):
    """The metrics cannot be read: the server does not answer, or answers with no Prometheus text."""


class MissingMetricsError(MetricsError):
    """The page is read, but the engine's speculative-decoding series are not on it."""


@dataclass(frozen=True)
class Sample:
    """One scrape, reduced: per role the sum over label sets (per position for the per-position roles)."""

    engine: str
    totals: dict[str, float]  # role -> value
    positions: dict[str, dict[int, float]] = field(default_factory=dict)  # role -> position -> value
    created: float | None = None  # the newest _created timestamp of its counters (a restart makes it newer)
    spec_tokens: int | None = None
    time: float = 0.0


def server_of(url: str) -> str:
    """``http://host:port`` of a metrics URL (where the recipe's requests go).

    >>> server_of("http://10.0.0.5:8000/metrics")
    'http://10.0.0.5:8000'
    """
    p = urllib.parse.urlsplit(url)
    return f"{p.scheme}://{p.netloc}"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102 - refuse: only the URL given
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} refused", headers, fp)


def _check_url(url: str) -> None:
    p = urllib.parse.urlsplit(url)
    if p.scheme not in ("http", "https") or not p.netloc:
        raise InputError(
            f"`metrics={url}` is not an http(s) URL",
            hint="give the engine's metrics URL, e.g. http://127.0.0.1:8000/metrics",
            options=("metrics",),
        )


def fetch(
    url: str,
    *,
    timeout: float = 10.0,
    retries: int = 3,
    backoff: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The text at ``url``, tried ``retries`` times, waiting ``backoff``, 2x, 4x... seconds between tries;
    raises :class:`MetricsError` naming the last failure."""
    _check_url(url)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    last = ""
    for attempt in range(max(1, retries)):
        if attempt:
            sleep(backoff * 2 ** (attempt - 1))
        try:
            with opener.open(urllib.request.Request(url, headers={"Accept": "text/plain"}), timeout=timeout) as r:
                body = r.read(MAX_BYTES + 1)
            if len(body) > MAX_BYTES:
                raise MetricsError(f"the metrics page at {url} is larger than {MAX_BYTES >> 20} MiB")
            return body.decode("utf-8", errors="replace")
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code} {e.reason}"
        except (urllib.error.URLError, OSError) as e:
            last = str(getattr(e, "reason", None) or e)
        log.debug("scrape %s failed (%s), attempt %d of %d", url, last, attempt + 1, retries)
    raise MetricsError(
        f"cannot read the metrics at {url} ({last}) after {max(1, retries)} tries",
        hint="check the URL and that the server is up (vLLM and SGLang serve /metrics, trtllm-serve "
        "/prometheus/metrics)",
    )


def _families(text: str):
    with needs("watch", "reading an engine's Prometheus metrics (or follow its log: --log)", "prometheus_client"):
        from prometheus_client.parser import text_string_to_metric_families

    try:
        return list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as e:
        raise MetricsError(
            f"the page is not Prometheus text ({e})",
            hint="give the engine's Prometheus route (trtllm-serve: /prometheus/metrics; its /metrics is JSON)",
        ) from None


def parse_metrics(text: str, engine: str | None = None, *, at: float = 0.0) -> Sample:
    """Reduce a scrape to one engine's series; ``engine`` None: the engine whose series it holds.

    Raises :class:`MissingMetricsError` naming the series missing and the version that exports them.
    """
    samples = [s for fam in _families(text) for s in fam.samples]
    names = {s.name for s in samples}
    rows = _rows(engine, names)
    eng = rows[0].engine
    totals: dict[str, float] = {}
    positions: dict[str, dict[int, float]] = {}
    created: list[float] = []
    spec: int | None = None
    wanted = {r.sample: r for r in rows}
    for s in samples:
        if s.name.endswith("_created") and s.name[: -len("_created")] + "_total" in wanted:
            created.append(float(s.value))
            continue
        r = wanted.get(s.name)
        if r is None:
            continue
        if r.role == SPEC_TOKENS:
            raw = s.labels.get(r.label) if r.label else s.value
            try:
                spec = int(float(raw)) if raw is not None and float(raw) > 0 else spec
            except ValueError:
                pass
        elif r.label:
            pos = s.labels.get(r.label)
            if pos is not None and pos.lstrip("-").isdigit():
                d = positions.setdefault(r.role, {})
                d[int(pos)] = d.get(int(pos), 0.0) + float(s.value)
        elif r.role == MEAN:  # a gauge of the last interval: kept as read, never summed
            totals[MEAN] = float(s.value)
        else:
            totals[r.role] = totals.get(r.role, 0.0) + float(s.value)
    for r in rows:  # every position's child made at start (vLLM): their count is the speculative tokens
        if spec is None and r.all_positions and positions.get(r.role):
            spec = len(positions[r.role])
    return Sample(eng, totals, positions, max(created) if created else None, spec, at)


def _rows(engine: str | None, names: set[str]) -> list[Series]:
    by_engine: dict[str, list[Series]] = {}
    for r in SERIES:
        by_engine.setdefault(r.engine, []).append(r)
    if engine is not None:
        if engine not in by_engine:
            raise InputError(
                f"hsdiff watch reads no metrics of engine {engine!r}", hint=f"use one of {', '.join(by_engine)}"
            )
        candidates = [engine]
    else:
        candidates = [e for e, rs in by_engine.items() if any(r.sample in names for r in rs)]
    if len(candidates) == 1 and any(r.sample in names for r in by_engine[candidates[0]]):
        return by_engine[candidates[0]]
    if len(candidates) > 1:
        raise MetricsError(
            f"the page holds the series of several engines ({', '.join(candidates)})",
            hint="give the engine with --engine",
        )
    raise MissingMetricsError(_missing(candidates[0] if candidates else None, names, by_engine))


def _missing(engine: str | None, names: set[str], by_engine: dict[str, list[Series]]) -> str:
    """Which series are missing, and what exports them: said per engine the page is from (by its prefix)."""
    seen = [e for e, w in WATCH_INFO.items() if any(n.startswith(w.prefix) for n in names)]
    engines = [engine] if engine else (seen or list(by_engine))
    parts = []
    for e in engines:
        rows = [r for r in by_engine[e] if r.role not in ("mean", SPEC_TOKENS)]
        listed = ", ".join(sorted({r.sample for r in rows}))
        since = sorted({r.since for r in rows if r.since})
        parts.append(f"{e}: {listed} (exported by {', '.join(since)} with {WATCH_INFO[e].enable})")
    head = (
        f"the page is {', '.join(seen)}'s but holds none of its speculative-decoding series"
        if seen
        else "the page holds no speculative-decoding series of any engine hsdiff reads"
    )
    return f"{head} — missing: " + "; ".join(parts)
