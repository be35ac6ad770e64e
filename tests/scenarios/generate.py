"""Random comparison scenarios with known ground truth, from real SmolLM2-135M states (30 layers).

A :class:`Scenario` says what the training side holds (its boundaries per slot, B-index), what the
engine was configured with and really captured, how the capture was written (format, noise, token
window, ranks, runs, printed values) and what a correct tool must answer: the boundary of every
training slot (or that nothing determines it) and whether the deployment should pass.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .. import builders as B
from .noise import sink_tokens

T = 24  # tokens per SmolLM2 fixture sample
LAST = B.L - 1  # deepest boundary every engine rule here can capture (SGLang's llama loop stops before B=L)
SHARED_PREFIX = 11  # tokens the three SmolLM2 samples have in common (system prompt, user header)
INFER_FORMATS = ("dumper-concat", "dumper-layers", "dumper-slots", "vllm", "log")


@dataclass
class Scenario:
    seed: int
    train_b: list[int]  # training slot boundaries, slot order (the truth)
    train_samples: list[int]
    train_format: str  # specforge | modelopt
    train_label: str  # none | right | shifted (a draft config.json in the training dir, SpecForge convention)
    engine: str  # sglang | vllm
    configured: list[int] | None  # ids in the engine's convention, as passed to --layer-ids
    capture_b: list[int]  # what the engine captured, in the engine's slot order (ascending)
    extra_b: list[int]  # further boundaries the dumper wrote (tagged), e.g. every layer
    infer_sample: int
    infer_format: str
    noise: str  # bf16 | fp16 | fp8 | gauss
    level: float  # added Gaussian noise, relative to each token's norm
    tokens: tuple[int, int]  # token window [start, stop) the capture holds
    with_ids: bool  # the inference side carries token ids
    ranks: int = 1
    corrupt_rank: bool = False
    runs: int = 1
    log_tokens: int = 0  # printed tokens per capture (log files)
    log_cols: int = 0  # printed values per token (log files)
    log_labels: str = "slot"  # slot | layer (B in the line) | none
    log_start: int = 0  # first printed token, counted from the start of the capture window
    model_config: bool = False
    truth: list[int | None] = field(default_factory=list)  # per slot: the boundary, or None if undeterminable
    should_pass: bool | None = None  # None: either answer is defensible

    @property
    def kwargs(self) -> dict:
        kw: dict = {"engine": self.engine}
        if self.configured is not None:
            kw["layer_ids"] = list(self.configured)
        if self.model_config:
            kw["model_config"] = str(B.SMOLLM2 / "config.json")
        return kw

    def tags(self) -> list[str]:
        """The traits of this scenario that a wrong answer can be traced to."""
        t = []
        if self.corrupt_rank:
            t.append("disagreeing-ranks")
        elif self.ranks > 1:
            t.append("tp-replicas")
        if self.runs > 1:
            t.append("several-runs")
        if self.infer_sample not in self.train_samples:
            t.append("shared-prefix")
        if self.train_b != sorted(self.train_b):
            t.append("unsorted-training")
        if self.train_label == "shifted":
            t.append("training-labels-off")
        if self.configured is not None and sorted(self.capture_b) != sorted(self.train_b):
            t.append("wrong-ids")
        if self.configured is None:
            t.append("no-ids")
        if self.infer_format == "log":
            t.append("log")
        if self.tokens[1] - self.tokens[0] <= 3:
            t.append("decode")
        if self.noise in ("fp8", "gauss") or self.level >= 0.02:
            t.append(f"noise-{self.noise}")
        if len(self.train_b) != 3:
            t.append(f"{len(self.train_b)}-slot")
        return t

    def describe(self) -> str:
        parts = [
            f"train B{self.train_b} ({self.train_format}, labels {self.train_label})",
            f"{self.engine} ids {self.configured} -> captured B{self.capture_b}",
        ]
        if self.extra_b:
            parts.append(f"+{len(self.extra_b)} tagged layers")
        parts.append(f"{self.infer_format} {self.noise}+{self.level:.3f} tokens {self.tokens[0]}:{self.tokens[1]}")
        if self.infer_format == "log":
            parts.append(f"printed {self.log_tokens}x{self.log_cols} ({self.log_labels})")
        if self.ranks > 1:
            parts.append(f"TP{self.ranks}{' corrupt' if self.corrupt_rank else ''}")
        if self.runs > 1:
            parts.append(f"{self.runs} runs")
        if self.train_samples == [] or self.infer_sample not in self.train_samples:
            parts.append("shared prefix only")
        return "; ".join(parts)


def to_ids(engine: str, boundaries: list[int]) -> list[int]:
    """Boundaries -> ids in the engine's convention (SGLang llama: O-index; vLLM: B-index)."""
    return [b - 1 for b in boundaries] if engine == "sglang" else list(boundaries)


def _train_boundaries(rng: random.Random) -> list[int]:
    k = rng.choices([1, 2, 3, 4], weights=[1, 1, 6, 2])[0]
    if k == 3 and rng.random() < 0.3:
        bs = [2, B.L // 2, B.L - 3]  # the EAGLE-3 default
    else:
        bs = sorted(rng.sample(range(1, LAST), k))
    if k > 1 and rng.random() < 0.08:  # a trainer that concatenated in list order
        while bs == sorted(bs):
            rng.shuffle(bs)
    return bs


def generate(seed: int) -> Scenario:
    """One scenario; the same seed gives the same scenario."""
    rng = random.Random(seed)
    train_b = _train_boundaries(rng)
    k = len(train_b)
    engine = rng.choice(["sglang", "sglang", "vllm"])
    shift = rng.choices([0, 1, -1, 2, -2], weights=[10, 4, 4, 1, 1])[0]
    cap_b = sorted(b + shift for b in train_b)
    if min(cap_b) < 1 or max(cap_b) > LAST:
        shift, cap_b = 0, sorted(train_b)
    if rng.random() < 0.1 and k > 1:  # one slot configured wrong on its own
        j = rng.randrange(k)
        b = cap_b[j] + rng.choice([-3, 3, 7])
        if 1 <= b <= LAST and b not in cap_b:
            cap_b[j] = b
            cap_b.sort()
    configured = to_ids(engine, cap_b) if rng.random() < 0.85 else None
    infer_format = rng.choices(INFER_FORMATS, weights=[4, 3, 1, 2, 3])[0]
    if infer_format == "vllm":
        engine, configured = "vllm", (cap_b if configured is not None else None)
    extra_b: list[int] = []
    if infer_format == "dumper-layers" and rng.random() < 0.4:
        extra_b = [b for b in range(0, LAST + 1) if b not in cap_b]
    infer_sample = rng.randrange(3)
    train_samples = sorted(rng.sample(range(3), rng.choice([1, 2, 3])))
    if infer_sample not in train_samples and rng.random() < 0.5:
        train_samples = sorted({*train_samples, infer_sample})
    noise = rng.choices(["bf16", "fp16", "fp8", "gauss"], weights=[5, 2, 2, 2])[0]
    level = {
        "bf16": rng.choice([0.0, 0.0, 0.01]),
        "fp16": 0.0,
        "fp8": 0.0,
        "gauss": rng.choice([0.005, 0.01, 0.02, 0.04, 0.06]),
    }[noise]
    window_kind = rng.choices(["full", "skip-first", "window", "decode"], weights=[5, 2, 2, 2])[0]
    if window_kind == "full":
        tokens = (0, T)
    elif window_kind == "skip-first":
        tokens = (1, T)
    elif window_kind == "window":
        a = rng.randrange(0, T - 6)
        tokens = (a, rng.randrange(a + 4, T + 1))
    else:
        a = rng.randrange(12, T - 1)
        tokens = (a, a + rng.choice([1, 2, 3]))
    with_ids = infer_format == "vllm" or (
        window_kind != "decode" and rng.random() < 0.8
    )  # the connector always writes ids
    sc = Scenario(
        seed=seed,
        train_b=train_b,
        train_samples=train_samples,
        train_format=rng.choice(["specforge", "modelopt"]),
        train_label=rng.choices(["none", "right", "shifted"], weights=[4, 5, 1])[0],
        engine=engine,
        configured=configured,
        capture_b=cap_b,
        extra_b=extra_b,
        infer_sample=infer_sample,
        infer_format=infer_format,
        noise=noise,
        level=level,
        tokens=tokens,
        with_ids=with_ids,
        model_config=rng.random() < 0.3,
    )
    if infer_format.startswith("dumper") and rng.random() < 0.2:
        sc.ranks = 2
        sc.corrupt_rank = rng.random() < 0.5
    if infer_format.startswith("dumper") and rng.random() < 0.08:
        sc.runs = 2
    if infer_format == "log":
        n = sc.tokens[1] - sc.tokens[0]
        sc.log_tokens = min(n, rng.choice([1, 1, 2, 4, 8]))
        sc.log_cols = max(1, min(64 // sc.log_tokens, rng.choice([5, 8, 16, 32, 64])))
        if sc.log_tokens * sc.log_cols < 5:
            sc.log_cols = 5
        sc.log_labels = rng.choice(["slot", "layer", "none"])
        sc.log_start = rng.randrange(0, n - sc.log_tokens + 1)
    _decide_truth(sc)
    return sc


def _decide_truth(sc: Scenario) -> None:
    shown = range(*sc.tokens)
    if sc.infer_format == "log":
        first = sc.tokens[0] + sc.log_start
        shown = range(first, first + sc.log_tokens)
    if sc.infer_sample not in sc.train_samples:  # only the shared prefix can match
        shown = range(shown.start, min(shown.stop, SHARED_PREFIX))
    ordinary = sum(1 for t in shown if t not in sink_tokens(sc.infer_sample))
    labels_known = (
        sc.configured is not None
        or sc.infer_format == "dumper-layers"
        or (sc.infer_format == "log" and sc.log_labels == "layer")
    )
    seen = set(sc.extra_b) | (set(sc.capture_b) if labels_known else set())
    truth: list[int | None] = []
    for b in sc.train_b:
        by_value = b in seen and ordinary >= 1
        by_label = sc.train_label == "right" or (b in sc.capture_b and labels_known)
        truth.append(b if by_value or by_label else None)
    sc.truth = truth
    # value evidence on every slot: >= 2 ordinary tokens settle it; a single one is borderline
    evidence = all(b in seen for b in sc.train_b) and ordinary >= 1
    configured_b = sorted(sc.capture_b) if sc.configured is not None else None
    if configured_b is not None and (configured_b != sc.train_b or sc.corrupt_rank):
        sc.should_pass = False
    elif not evidence:
        sc.should_pass = False
    elif sc.runs > 1 or sc.train_label == "shifted" or ordinary < 2 or configured_b is None:
        sc.should_pass = None
    else:
        sc.should_pass = True
