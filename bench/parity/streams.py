"""Seeded request streams for the vLLM scheduler parity recordings.

Stdlib only (no numpy): every stream is a pure function of its seed, built with
``random.Random(seed)``, so pagesim's tests can rebuild a stream from its name and
seed and compare against the recorded file.

A prompt is a list of segments ``[[key, length], ...]``; ``expand_prompt`` turns
it into token ids.  Requests that share the key of their first segment share that
prefix token-for-token.  ``output_token`` is the k-th sampled token (0-based) of
the request with integer index ``j`` (for an n > 1 request, child c uses
``j * 16 + c``).
"""

from __future__ import annotations

import bisect
import random

# Knobs every stream gets unless it overrides them (vLLM's defaults, except the
# model length, which has to hold 3000-token prompts plus their outputs).
BASE_CONFIG = {
    "block_size": 16,
    "num_gpu_blocks": 4096,
    "max_num_seqs": 128,
    "max_num_batched_tokens": 2048,
    "max_model_len": 4096,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "max_num_partial_prefills": 1,
    "max_long_partial_prefills": 1,
    "policy": "fcfs",
    "async_scheduling": False,
    "watermark": 0.0,
}

BASE_STEP_TIME = {"step": 0.004, "tokens": 2e-05, "seqs": 0.0001}

# Keys below this are shared-prefix keys; unique segments use keys above it.
UNIQUE_KEY_BASE = 1_000_000


def expand_segment(key: int, length: int) -> list[int]:
    return [1 + ((key * 1_000_003 + i) * 2_654_435_761) % 32_000 for i in range(length)]


def expand_prompt(prompt: list[list[int]]) -> list[int]:
    tokens: list[int] = []
    for key, length in prompt:
        tokens.extend(expand_segment(key, length))
    return tokens


def output_token(j: int, k: int) -> int:
    return 32_001 + ((j * 7_777_777 + k * 97) % 30_000)


def child_index(j: int, child: int) -> int:
    return j * 16 + child


class _Builder:
    """Accumulates requests; hands out unique segment keys."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.requests: list[dict] = []
        self._next_key = UNIQUE_KEY_BASE

    def unique_key(self) -> int:
        self._next_key += 1
        return self._next_key

    def add(
        self,
        arrival_s: float,
        prompt: list[list[int]],
        max_tokens: int,
        priority: int = 0,
        n: int = 1,
    ) -> None:
        j = len(self.requests)
        self.requests.append(
            {
                "id": f"r{j}",
                "arrival_s": arrival_s,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "priority": priority,
                "n": n,
            }
        )

    def poisson_times(self, count: int, rate: float, start: float = 0.0) -> list[float]:
        t = start
        out = []
        for _ in range(count):
            t += self.rng.expovariate(rate)
            out.append(round(t, 6))
        return out


def _zipf_sampler(rng: random.Random, n: int, s: float):
    weights = [1.0 / (k**s) for k in range(1, n + 1)]
    cum = []
    acc = 0.0
    for w in weights:
        acc += w
        cum.append(acc)

    def draw() -> int:
        return bisect.bisect_left(cum, rng.random() * acc)

    return draw


# ---------------------------------------------------------------- the streams


def burst_shared_prefix(b: _Builder) -> dict:
    """Bursts of 20 requests arriving at the same instant, sharing a long prefix:
    the first one's prefill registers full blocks that the later ones in the same
    step may (or may not) hit."""
    t = 0.0
    for burst in range(6):
        prefix_len = b.rng.choice([512, 768, 1024])
        for _ in range(20):
            suffix = b.rng.randint(16, 256)
            b.add(t, [[burst + 1, prefix_len], [b.unique_key(), suffix]], b.rng.randint(8, 64))
        t = round(t + b.rng.uniform(0.5, 1.5), 6)
    return {"num_gpu_blocks": 3000}


def burst_shared_prefix_short(b: _Builder) -> dict:
    """Same-step prefix sharing with a prefix that fits one budget: 30 requests at
    once with a 200-token shared prefix and tiny suffixes."""
    t = 0.0
    for burst in range(5):
        for _ in range(30):
            b.add(
                t,
                [[100 + burst, 200], [b.unique_key(), b.rng.randint(1, 40)]],
                b.rng.randint(4, 32),
            )
        t = round(t + 0.8, 6)
    return {"num_gpu_blocks": 2000}


def kv_pressure_small_budget(b: _Builder) -> dict:
    """Heavy KV pressure (preemptions) with a 256-token budget."""
    for t in b.poisson_times(150, 12.0):
        b.add(t, [[b.unique_key(), b.rng.randint(64, 1024)]], b.rng.randint(50, 200))
    return {"num_gpu_blocks": 200, "max_num_batched_tokens": 256}


def kv_pressure_large_budget(b: _Builder) -> dict:
    """Heavy KV pressure (preemptions) with an 8192-token budget."""
    for t in b.poisson_times(150, 25.0):
        b.add(t, [[b.unique_key(), b.rng.randint(64, 1024)]], b.rng.randint(50, 200))
    return {"num_gpu_blocks": 300, "max_num_batched_tokens": 8192}


def long_chunked_prompts(b: _Builder) -> dict:
    """Long prompts chunked over many steps by a 512-token budget."""
    for t in b.poisson_times(60, 2.0):
        b.add(t, [[b.unique_key(), b.rng.randint(1500, 3000)]], b.rng.randint(8, 64))
    return {"num_gpu_blocks": 1500, "max_num_batched_tokens": 512}


def zipf_prefix_churn(b: _Builder) -> dict:
    """40 prefix groups drawn Zipf(1.1); the cache holds only a few groups, so
    cached blocks get evicted and re-computed (LRU order of the free queue)."""
    groups = [(200 + g, b.rng.randint(256, 768)) for g in range(40)]
    draw = _zipf_sampler(b.rng, len(groups), 1.1)
    for t in b.poisson_times(250, 15.0):
        key, plen = groups[draw()]
        b.add(t, [[key, plen], [b.unique_key(), b.rng.randint(16, 128)]], b.rng.randint(1, 48))
    return {"num_gpu_blocks": 400}


def no_prefix_caching(b: _Builder) -> dict:
    """The Zipf-prefix workload with prefix caching off."""
    groups = [(300 + g, b.rng.randint(256, 768)) for g in range(40)]
    draw = _zipf_sampler(b.rng, len(groups), 1.1)
    for t in b.poisson_times(200, 12.0):
        key, plen = groups[draw()]
        b.add(t, [[key, plen], [b.unique_key(), b.rng.randint(16, 128)]], b.rng.randint(1, 48))
    return {"num_gpu_blocks": 400, "enable_prefix_caching": False}


def priority_random(b: _Builder) -> dict:
    """Priority policy, random priorities 0..4, moderate pressure."""
    for t in b.poisson_times(150, 15.0):
        b.add(
            t,
            [[b.unique_key(), b.rng.randint(32, 768)]],
            b.rng.randint(16, 160),
            priority=b.rng.randint(0, 4),
        )
    return {"policy": "priority", "num_gpu_blocks": 350}


def priority_preemption(b: _Builder) -> dict:
    """Priority policy under heavy pressure: low-priority long decodes arrive
    first, high-priority requests later preempt them."""
    for t in b.poisson_times(60, 20.0):
        b.add(
            t,
            [[b.unique_key(), b.rng.randint(256, 1024)]],
            b.rng.randint(120, 200),
            priority=b.rng.randint(3, 5),
        )
    for t in b.poisson_times(80, 25.0, start=1.0):
        b.add(
            t,
            [[b.unique_key(), b.rng.randint(32, 512)]],
            b.rng.randint(16, 96),
            priority=b.rng.randint(0, 2),
        )
    return {"policy": "priority", "num_gpu_blocks": 220, "max_num_batched_tokens": 1024}


def parallel_sampling_n(b: _Builder) -> dict:
    """n > 1 requests: children share the prompt (prefix hits across siblings)."""
    for t in b.poisson_times(60, 6.0):
        n = b.rng.choice([1, 2, 3, 4])
        b.add(t, [[b.unique_key(), b.rng.randint(64, 1200)]], b.rng.randint(16, 128), n=n)
    return {"num_gpu_blocks": 600}


def mixed_long_short_threshold(b: _Builder) -> dict:
    """Mixed long and short prompts with long_prefill_token_threshold=256 and
    max_num_partial_prefills=4 (the latter is recorded as asked; whether the
    version has the knob is noted in the file's config)."""
    for t in b.poisson_times(150, 10.0):
        plen = b.rng.randint(1500, 3000) if b.rng.random() < 0.25 else b.rng.randint(16, 96)
        b.add(t, [[b.unique_key(), plen]], b.rng.randint(8, 96))
    return {
        "num_gpu_blocks": 1500,
        "long_prefill_token_threshold": 256,
        "max_num_partial_prefills": 4,
        "max_long_partial_prefills": 2,
    }


def max_num_seqs_bursts(b: _Builder) -> dict:
    """Bursts of 40 short requests against max_num_seqs=8."""
    t = 0.0
    for _ in range(5):
        for _ in range(40):
            b.add(t, [[b.unique_key(), b.rng.randint(16, 200)]], b.rng.randint(4, 64))
        t = round(t + b.rng.uniform(1.0, 3.0), 6)
    return {"num_gpu_blocks": 1000, "max_num_seqs": 8}


def async_basic(b: _Builder) -> dict:
    """Async scheduling (AsyncScheduler + a 2-deep batch queue), light load."""
    for t in b.poisson_times(150, 20.0):
        b.add(
            t,
            [[1 + b.rng.randint(0, 3), 128], [b.unique_key(), b.rng.randint(16, 512)]],
            b.rng.randint(1, 120),
        )
    return {"async_scheduling": True, "num_gpu_blocks": 2000}


def async_pressure(b: _Builder) -> dict:
    """Async scheduling under KV pressure (preemptions with in-flight steps)."""
    for t in b.poisson_times(120, 20.0):
        b.add(t, [[b.unique_key(), b.rng.randint(64, 1024)]], b.rng.randint(50, 200))
    return {"async_scheduling": True, "num_gpu_blocks": 220, "max_num_batched_tokens": 512}


def async_max_num_seqs_bursts(b: _Builder) -> dict:
    """Async scheduling where max_num_seqs binds: bursts of 200 against max_num_seqs 64.
    A request that finished in step k still holds its slot in the plan of step k+1
    (vLLM plans it before step k's output removes the request from running)."""
    t = 0.0
    for _ in range(3):
        for _ in range(200):
            b.add(t, [[1 + b.rng.randint(0, 3), 32], [b.unique_key(), b.rng.randint(16, 160)]],
                  b.rng.randint(2, 48))  # fmt: skip
        t = round(t + b.rng.uniform(0.5, 1.5), 6)
    return {"async_scheduling": True, "num_gpu_blocks": 3000, "max_num_seqs": 64}


def async_max_num_seqs_short(b: _Builder) -> dict:
    """Async scheduling, max_num_seqs 16, many one- and two-token outputs: slots free
    every step, so the held slot decides nearly every admission."""
    for t in b.poisson_times(300, 200.0):
        b.add(t, [[b.unique_key(), b.rng.randint(8, 96)]], b.rng.randint(1, 6))
    return {"async_scheduling": True, "num_gpu_blocks": 1500, "max_num_seqs": 16}


def watermark_pressure(b: _Builder) -> dict:
    """KV pressure with the admission watermark at 0.05 (vLLM's default is 0.0)."""
    for t in b.poisson_times(150, 12.0):
        b.add(t, [[b.unique_key(), b.rng.randint(64, 1024)]], b.rng.randint(50, 200))
    return {"num_gpu_blocks": 250, "watermark": 0.05, "max_num_batched_tokens": 512}


def large_batch(b: _Builder) -> dict:
    """A full engine: 256 running requests most steps (the batch serving engineers run),
    where the scheduler's per-request cost shows."""
    for t in b.poisson_times(800, 400.0):
        b.add(
            t,
            [[1 + b.rng.randint(0, 7), 64], [b.unique_key(), b.rng.randint(16, 192)]],
            b.rng.randint(150, 400),
        )
    return {"num_gpu_blocks": 20000, "max_num_seqs": 256}


# -- models whose layers keep different KV (issue 41): ``kv_groups`` lists each KV cache
# group's sliding window in tokens (None: full attention), in vLLM's group order (by each
# attention type's first layer); the driver builds vLLM's KVCacheConfig with one group
# per entry over the one pool, as vLLM's hybrid prefix-caching tests build it.


def hybrid_alternating(b: _Builder) -> dict:
    """gpt-oss-like 1:1 alternation (a 128-token window group, a full group), prompts
    longer than the window, moderate load: the window's blocks are released as the
    sequences decode."""
    for t in b.poisson_times(120, 10.0):
        b.add(t, [[b.unique_key(), b.rng.randint(100, 1500)]], b.rng.randint(20, 300))
    return {"kv_groups": [128, None], "num_gpu_blocks": 1200}


def hybrid_five_to_one(b: _Builder) -> dict:
    """Gemma-3-like 5:1 (five 256-token window groups, one full group), a shared system
    prompt on half of the requests."""
    for t in b.poisson_times(100, 8.0):
        prefix = [[7, 384]] if b.rng.random() < 0.5 else []
        b.add(t, [*prefix, [b.unique_key(), b.rng.randint(50, 1200)]], b.rng.randint(20, 200))
    return {"kv_groups": [256] * 5 + [None], "num_gpu_blocks": 3000}


def hybrid_shared_prefix_long(b: _Builder) -> dict:
    """Shared prefixes much longer than the window (1,024-2,048 tokens, a 64-token
    window): a hit needs the window's blocks before its end, cached in both groups."""
    t = 0.0
    for burst in range(8):
        prefix = [[200 + burst % 3, b.rng.choice([1024, 1536, 2048])]]
        for _ in range(12):
            b.add(t, [*prefix, [b.unique_key(), b.rng.randint(8, 200)]], b.rng.randint(8, 80))
        t = round(t + b.rng.uniform(0.6, 1.6), 6)
    return {"kv_groups": [64, None], "num_gpu_blocks": 2500}


def hybrid_kv_pressure(b: _Builder) -> dict:
    """KV pressure with preemptions on a 1:1 model (32-token windows, a small pool)."""
    for t in b.poisson_times(150, 14.0):
        b.add(t, [[b.unique_key(), b.rng.randint(64, 1024)]], b.rng.randint(50, 250))
    return {"kv_groups": [32, None], "num_gpu_blocks": 400, "max_num_batched_tokens": 1024}


def hybrid_long_prompts(b: _Builder) -> dict:
    """Prompts far longer than the window and the budget (1,500-3,000 tokens, a 64-token
    window, a 512-token budget) on a pool that admission fills: vLLM admits a request
    when its full-attention blocks and the window's capped share (the window, the
    tokens in flight and a block) fit."""
    for t in b.poisson_times(60, 6.0):
        b.add(t, [[b.unique_key(), b.rng.randint(1500, 3000)]], b.rng.randint(16, 128))
    return {"kv_groups": [64, None], "num_gpu_blocks": 900, "max_num_batched_tokens": 512}


# name -> (seed, builder)
STREAMS = {
    "burst_shared_prefix": (11, burst_shared_prefix),
    "burst_shared_prefix_short": (12, burst_shared_prefix_short),
    "kv_pressure_small_budget": (21, kv_pressure_small_budget),
    "kv_pressure_large_budget": (22, kv_pressure_large_budget),
    "long_chunked_prompts": (31, long_chunked_prompts),
    "zipf_prefix_churn": (41, zipf_prefix_churn),
    "no_prefix_caching": (42, no_prefix_caching),
    "priority_random": (51, priority_random),
    "priority_preemption": (52, priority_preemption),
    "parallel_sampling_n": (61, parallel_sampling_n),
    "mixed_long_short_threshold": (71, mixed_long_short_threshold),
    "max_num_seqs_bursts": (81, max_num_seqs_bursts),
    "async_basic": (91, async_basic),
    "async_pressure": (92, async_pressure),
    "async_max_num_seqs_bursts": (93, async_max_num_seqs_bursts),
    "async_max_num_seqs_short": (94, async_max_num_seqs_short),
    "watermark_pressure": (101, watermark_pressure),
    "large_batch": (111, large_batch),
    "hybrid_alternating": (121, hybrid_alternating),
    "hybrid_five_to_one": (122, hybrid_five_to_one),
    "hybrid_shared_prefix_long": (123, hybrid_shared_prefix_long),
    "hybrid_kv_pressure": (124, hybrid_kv_pressure),
    "hybrid_long_prompts": (125, hybrid_long_prompts),
}


def build_stream(name: str) -> dict:
    """Return {"stream", "seed", "config", "step_time", "requests"} for a stream."""
    seed, fn = STREAMS[name]
    b = _Builder(seed)
    overrides = fn(b)
    config = dict(BASE_CONFIG)
    config.update(overrides)
    for r in b.requests:
        plen = sum(length for _, length in r["prompt"])
        assert plen + r["max_tokens"] <= config["max_model_len"], (name, r["id"])
        assert plen // config["block_size"] + 2 < config["num_gpu_blocks"], (name, r["id"])
    return {
        "stream": name,
        "seed": seed,
        "config": config,
        "step_time": dict(BASE_STEP_TIME),
        "requests": b.requests,
    }


def step_seconds(step_time: dict, tokens: int, seqs: int) -> float:
    """step_s = step + tokens * T + seqs * S, in exactly that order."""
    return step_time["step"] + tokens * step_time["tokens"] + seqs * step_time["seqs"]
