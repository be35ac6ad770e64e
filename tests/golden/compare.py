"""How a golden report is compared with a new one.

What a user relies on is compared exactly: exit code, verdict, ids, evidence, status, the matched
capture (and sample and offset) of every decided slot, cause, warnings, token counts, every string and
integer. A metric is a float whose last bits depend on the CPU: it is equal within the noise of how it
is computed and how it is stored, and nothing else.

*Computed.* Every metric comes from float32 sums of squares over one row of ``H`` values (the hidden
size): ``|x|^2``, ``|y|^2`` and ``|x - y|^2`` of each token, summed by a BLAS kernel that OpenBLAS picks
for the CPU (numpy's ``vecdot``). Summed in any order, such a sum is within ``gamma_H = H u / (1 - H u)``
(``u = 2**-24``) of the exact one, relative, as its terms are all positive; two kernels therefore differ
by at most ``DELTA = 2 gamma_H`` relative (1e-4 at H = 576: the bound is far from reached, but it is
what holds on every CPU). From there, to first order:

* a norm, an error ``|x - y| / |y|``, a norm ratio, and any order statistic or interpolated quantile
  of them over tokens: relative ``DELTA``;
* a cosine, ``(|x|^2 + |y|^2 - |x - y|^2) / (2 |x| |y|)``: absolute ``DELTA (r + 1/r - c + |c|)`` with
  ``r`` the norm ratio (where the record has none, norms within a factor :data:`R_UNKNOWN`);
* a margin (runner-up error minus the match's): absolute ``DELTA`` times the sum of the two errors;
* a confidence ``log10(separation / error)``: absolute ``2 DELTA / ln 10``, and it is stored to 4 decimals.

*Stored.* Reports keep 6 decimals (scores, metrics) or 4 significant digits (the pictures' curves and
norms); golden files keep 6 significant digits. Two values within ``t`` of each other, each rounded to
a grid of step ``q``, are within ``t + q``.

*Arbitrary choices.* A score row whose best error is above the report's tolerance matches nothing: which
training sample it was read against is not pinned (two samples holding the same tokens tie).

*Text.* Words are compared one by one; a number printed with a decimal point or a percent sign is a
metric: equal within one unit of its last printed digit plus ten times the computed noise; every other
number (ids, layers, counts, versions) is compared exactly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: float32's unit roundoff.
U32 = 2.0**-24
#: Norms of two compared tensors are taken to be within this factor where a record gives no ratio.
R_UNKNOWN = 8.0
#: A report without its hidden size is judged as one of this width (the widest the tests build).
H_UNKNOWN = 8192
#: Significant digits the golden files keep (:func:`round_floats`).
GOLDEN_DIGITS = 6
#: Decimals a report keeps for its metrics, and significant digits of the pictures' curves and norms.
REPORT_DECIMALS = 6
PROFILE_DIGITS = 4
CONFIDENCE_DECIMALS = 4


def summed_noise(width: int) -> float:
    """``DELTA``: the largest relative difference two summation orders give a float32 sum of ``width``
    positive terms (each within ``gamma_width`` of the exact sum)."""
    g = width * U32
    return 2 * g / (1 - g)


def round_floats(obj: Any) -> Any:
    """Every float to :data:`GOLDEN_DIGITS` significant digits, as the golden files store them."""
    if isinstance(obj, float):
        return float(f"{obj:.{GOLDEN_DIGITS}g}")
    if isinstance(obj, dict):
        return {k: round_floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [round_floats(v) for v in obj]
    return obj


def _step(v: float, digits: int) -> float:
    """The grid step of ``v`` rounded to ``digits`` significant digits."""
    return 0.0 if v == 0 else 10.0 ** (math.floor(math.log10(abs(v))) - digits + 1)


@dataclass(frozen=True)
class Noise:
    """How far a metric may move on another CPU: ``computed`` by the summation order, and the grid
    steps it is stored on (the report's ``decimals``, then ``digits`` significant digits)."""

    computed: float
    decimals: int | None = REPORT_DECIMALS
    digits: int = GOLDEN_DIGITS

    def store(self, v: float) -> float:
        """``v`` as a report, then a golden file, keeps it."""
        if self.decimals is not None:
            v = round(v, self.decimals)
        return float(f"{v:.{self.digits}g}")

    def allowed(self, v: float) -> float:
        """Two values within ``computed``, each then stored: within ``computed`` plus each grid step (the
        coarser step of the two sides: a cosine of 0.99992 on one CPU can be 1.00006 on another)."""
        return (
            self.computed
            + (0.0 if self.decimals is None else 10.0**-self.decimals)
            + _step(abs(v) + self.computed, self.digits)
        )


def _relative(delta: float, v: float, parent: dict) -> Noise:
    return Noise(delta * abs(v))


def _cosine(delta: float, v: float, parent: dict) -> Noise:
    r = parent.get("norm_ratio")
    if not isinstance(r, float) or not r > 0:
        r = R_UNKNOWN
    return Noise(delta * (r + 1 / r - v + abs(v)))


def _margin(delta: float, v: float, parent: dict) -> Noise:
    top = (parent.get("metrics") or {}).get("rel_err")
    top = abs(top) if isinstance(top, float) else 1.0
    return Noise(delta * (2 * top + abs(v)))


def _confidence(delta: float, v: float, parent: dict) -> Noise:
    return Noise(2 * delta / math.log(10), CONFIDENCE_DECIMALS)


def _profile(delta: float, v: float, parent: dict) -> Noise:
    return Noise(delta * abs(v), None, PROFILE_DIGITS)


Rule = Callable[[float, float, dict], Noise]
#: The metrics: a float under one of these keys is compared within the noise its rule gives; a float
#: under any other key is an input (the tolerance given, a version) and compared exactly.
RULES: dict[str, Rule] = {
    "rel_err": _relative,
    "p90_err": _relative,
    "norm_ratio": _relative,
    "cosine": _cosine,
    "margin": _margin,
    "separation": _relative,
    "confidence": _confidence,
    "median_norm": _profile,
    "max_norm": _profile,
    "error": _profile,  # a per-token curve: a list of floats under this key
}


def hidden_size(doc: Any) -> int:
    """The report's hidden size (a gate's report sits one level down)."""
    if isinstance(doc, dict):
        if isinstance(doc.get("hidden_size"), int) and doc["hidden_size"] > 0:
            return doc["hidden_size"]
        for v in doc.values():
            h = hidden_size(v)
            if h:
                return h
    return 0


def report_tolerance(doc: Any) -> float | None:
    if isinstance(doc, dict):
        if isinstance(doc.get("tolerance"), float) and "slots" in doc:
            return doc["tolerance"]
        for v in doc.values():
            t = report_tolerance(v)
            if t is not None:
                return t
    return None


def differences(got: Any, want: Any) -> list[str]:
    """Where ``got`` differs from ``want`` beyond what a CPU changes (module docstring); each names its
    place in the report."""
    delta = summed_noise(hidden_size(want) or H_UNKNOWN)
    return _walk(got, want, "", None, {}, delta, report_tolerance(want))


def _walk(
    got: Any, want: Any, at: str, rule: Rule | None, parent: dict, delta: float, tolerance: float | None
) -> list[str]:
    if isinstance(got, float) and isinstance(want, float) and rule is not None:
        tol = rule(delta, want, parent).allowed(want)
        return [] if abs(got - want) <= tol else [f"{at}: {got!r} != {want!r} (allowed {tol:.2g})"]
    if isinstance(got, dict) and isinstance(want, dict):
        if got.keys() != want.keys():
            return [f"{at}: keys {sorted(got.keys() ^ want.keys())} in one side only"]
        free = free_keys(at, want, tolerance)
        return [
            d
            for k in want
            if k not in free
            for d in _walk(got[k], want[k], f"{at}.{k}", RULES.get(k), want, delta, tolerance)
        ]
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return [f"{at}: {len(got)} items != {len(want)}"]
        return [
            d
            for i, (g, w) in enumerate(zip(got, want))
            for d in _walk(g, w, f"{at}[{i}]", rule, parent, delta, tolerance)
        ]
    return [] if type(got) is type(want) and got == want else [f"{at}: {got!r} != {want!r}"]


def free_keys(at: str, want: dict, tolerance: float | None) -> tuple[str, ...]:
    """Keys whose value is an arbitrary choice: the sample of a score row that matches nothing."""
    if not re.search(r"\.scores\[\d+\]$", at) or tolerance is None:
        return ()
    err = want.get("rel_err")
    return ("sample",) if err is None or (isinstance(err, float) and err > tolerance) else ()


_NUMBER = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?)(%?)(?![\w.]\d|\d)")


def text_differences(got: str, want: str, width: int = H_UNKNOWN) -> list[str]:
    """Word-by-word differences of two text outputs (line breaks do not count: where a long path
    wraps depends on the checkout); metrics printed in them within their noise (module docstring)."""
    delta = summed_noise(width)
    g, w = got.split(), want.split()
    if len(g) != len(w):
        return [
            f"text: {len(g)} words != {len(w)}: first difference at word "
            f"{next((i for i, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))}"
        ]
    out = []
    for i, (a, b) in enumerate(zip(g, w)):
        if a != b and not _same_word(a, b, delta):
            out.append(f"text word {i}: {a!r} != {b!r} (... {' '.join(w[max(0, i - 6) : i])} ...)")
    return out


def _same_word(a: str, b: str, delta: float) -> bool:
    na, nb = _NUMBER.findall(a), _NUMBER.findall(b)
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b) or len(na) != len(nb):
        return False
    for (x, px), (y, py) in zip(na, nb):
        if px != py or ("." in x) != ("." in y):
            return False
        if x == y:
            continue
        if "." not in x and not px:  # an id, a layer, a count
            return False
        decimals = len(x.split(".")[1]) if "." in x else 0
        unit = 10.0**-decimals
        v = float(y)
        noise = 10 * delta * (abs(v) if px else max(abs(v), 1.0))  # a percentage is an error: relative
        if abs(float(x) - v) > unit + noise:
            return False
    return True
