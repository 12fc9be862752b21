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
    """A prompt's token ids. A segment ``[key, length]`` with a negative key quotes the
    first ``length`` output tokens of request ``-key - 1`` (a chat's earlier answer)."""
    tokens: list[int] = []
    for key, length in prompt:
        if key < 0:
            tokens.extend(output_token(-key - 1, k) for k in range(length))
        else:
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
        **hand_off: bool,
    ) -> None:
        """``hand_off``: a P/D stream's flags of the request (``local``: a decode
        instance serves it whole; ``abandoned``: no decode instance reads its KV)."""
        j = len(self.requests)
        self.requests.append(
            {
                "id": f"r{j}",
                "arrival_s": arrival_s,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "priority": priority,
                "n": n,
                **{flag: True for flag, on in hand_off.items() if on},
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
            b.add(
                t,
                [[1 + b.rng.randint(0, 3), 32], [b.unique_key(), b.rng.randint(16, 160)]],
                b.rng.randint(2, 48),
            )
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


# -- models whose layers keep different KV: ``model`` names a shipped config.json
# (scenarios/models/) that the recorder hands to vLLM, which builds the model and its KV
# cache config itself (bench/parity/vllm_kv_config.py); ``hf_overrides`` are vLLM's own
# ``--hf-overrides`` (a smaller window, so that windows matter at these lengths; every
# layer a window), and pagesim's replay applies the same keys to the same config.


def _system_prompts(b: _Builder, count: int, low: int, high: int, base: int) -> list:
    return [[base + g, b.rng.randint(low, high)] for g in range(count)]


def _behind_system_prompts(b: _Builder, systems, times, share, prompt, output) -> None:
    """A request at each of ``times``, a ``share`` of them behind one of ``systems``, each
    with a unique part of ``prompt`` (low, high) tokens and ``output`` (low, high) out."""
    for t in times:
        prefix = [b.rng.choice(systems)] if b.rng.random() < share else []
        b.add(t, [*prefix, [b.unique_key(), b.rng.randint(*prompt)]], b.rng.randint(*output))


def hybrid_alternating(b: _Builder) -> dict:
    """gpt-oss-20b (24 layers, 128-token windows on every other one), prompts longer than
    the window, a third of them behind one of two 300-600-token system prompts."""
    systems = _system_prompts(b, 2, 300, 600, 400)
    times = b.poisson_times(120, 10.0)
    _behind_system_prompts(b, systems, times, 0.33, (100, 1500), (20, 300))
    return {"model": "gpt-oss-20b", "num_gpu_blocks": 1200}


def hybrid_five_to_one(b: _Builder) -> dict:
    """Gemma 3 12B (48 layers, 5 window layers to 1 full; its window overridden to 256),
    32-token blocks, a shared system prompt on half of the requests."""
    for t in b.poisson_times(100, 8.0):
        prefix = [[7, 384]] if b.rng.random() < 0.5 else []
        b.add(t, [*prefix, [b.unique_key(), b.rng.randint(50, 1200)]], b.rng.randint(20, 200))
    return {
        "model": "gemma-3-12b",
        "hf_overrides": {"sliding_window": 256},
        "block_size": 32,
        "num_gpu_blocks": 1500,
    }


def hybrid_shared_prefix_long(b: _Builder) -> dict:
    """gpt-oss-20b, shared prefixes much longer than the window (1,024-2,048 tokens) in
    bursts: a hit needs the window's blocks before its end, cached in both groups; the
    request that finds a prefix only full attention holds gets no hit itself."""
    t = 0.0
    for burst in range(8):
        prefix = [[200 + burst % 3, b.rng.choice([1024, 1536, 2048])]]
        for _ in range(12):
            b.add(t, [*prefix, [b.unique_key(), b.rng.randint(8, 200)]], b.rng.randint(8, 80))
        t = round(t + b.rng.uniform(0.6, 1.6), 6)
    return {"model": "gpt-oss-20b", "num_gpu_blocks": 2500}


def hybrid_kv_pressure(b: _Builder) -> dict:
    """KV pressure with preemptions on gpt-oss-20b (windows overridden to 32, a small
    pool): eviction order and the window's releases under a full pool."""
    systems = _system_prompts(b, 3, 100, 400, 500)
    times = b.poisson_times(150, 14.0)
    _behind_system_prompts(b, systems, times, 0.5, (64, 1024), (50, 250))
    return {
        "model": "gpt-oss-20b",
        "hf_overrides": {"sliding_window": 32},
        "num_gpu_blocks": 400,
        "max_num_batched_tokens": 1024,
    }


def hybrid_long_prompts(b: _Builder) -> dict:
    """Prompts far longer than the window and the budget (1,500-3,000 tokens, gpt-oss-20b
    with 64-token windows, a 512-token budget) on a pool that admission fills: vLLM admits
    a request when its full-attention blocks and the window's capped share fit."""
    for t in b.poisson_times(60, 6.0):
        b.add(t, [[b.unique_key(), b.rng.randint(1500, 3000)]], b.rng.randint(16, 128))
    return {
        "model": "gpt-oss-20b",
        "hf_overrides": {"sliding_window": 64},
        "num_gpu_blocks": 900,
        "max_num_batched_tokens": 512,
    }


def hybrid_all_window(b: _Builder) -> dict:
    """Every layer a window (Mistral-7B with ``layer_types`` all sliding, a 512-token
    window): one group, vLLM's unitary coordinator. System prompts of 1-2K tokens longer
    than the window, and a few prompts sent twice."""
    systems = _system_prompts(b, 3, 1000, 2000, 600)
    sent = []
    for t in b.poisson_times(80, 6.0):
        if sent and b.rng.random() < 0.15:
            prompt = b.rng.choice(sent)
        else:
            prompt = [b.rng.choice(systems), [b.unique_key(), b.rng.randint(20, 400)]]
            sent.append(prompt)
        b.add(t, prompt, b.rng.randint(16, 160))
    layers = ["sliding_attention"] * 32
    return {
        "model": "mistral-7b",
        "hf_overrides": {"sliding_window": 512, "layer_types": layers},
        "num_gpu_blocks": 1500,
        "max_model_len": 8192,
    }


def hybrid_multi_turn(b: _Builder) -> dict:
    """Multi-turn chats on Gemma 3 12B (windows overridden to 128, 32-token blocks): each
    turn's prompt is the previous turn's prompt, its answer and a new question."""
    t = 0.0
    chats = []
    for _ in range(25):
        first = [[b.unique_key(), b.rng.randint(100, 600)]]
        chats.append(first)
    for turn in range(4):
        for c, prompt in enumerate(chats):
            arrival = round(t + turn * 2.5 + c * 0.07 + b.rng.uniform(0, 0.05), 6)
            j = len(b.requests)
            answer = b.rng.randint(16, 120)
            b.add(arrival, prompt, answer)
            chats[c] = [*prompt, [-(j + 1), answer], [b.unique_key(), b.rng.randint(10, 80)]]
    return {
        "model": "gemma-3-12b",
        "hf_overrides": {"sliding_window": 128},
        "block_size": 32,
        "num_gpu_blocks": 1200,
        "max_model_len": 8192,
    }


def hybrid_duplicates(b: _Builder) -> dict:
    """Duplicate cached blocks under eviction (gpt-oss-20b, 64-token windows, a small pool):
    bursts of requests that compute the same new prefix in the same step each cache their
    own copy; which copy a later hit takes and which survive eviction decide later hits."""
    t = 0.0
    for burst in range(14):
        prefix = [[700 + burst % 5, b.rng.choice([256, 384, 512])]]
        for _ in range(b.rng.randint(3, 8)):
            b.add(t, [*prefix, [b.unique_key(), b.rng.randint(8, 160)]], b.rng.randint(8, 120))
        t = round(t + b.rng.uniform(0.3, 1.2), 6)
    return {"model": "gpt-oss-20b", "hf_overrides": {"sliding_window": 64}, "num_gpu_blocks": 450}


def hybrid_async(b: _Builder) -> dict:
    """Async scheduling on gpt-oss-20b (64-token windows): a window's blocks are released
    a step after its tokens are processed; shared system prompts and a pool that fills."""
    systems = _system_prompts(b, 2, 200, 500, 800)
    times = b.poisson_times(120, 16.0)
    _behind_system_prompts(b, systems, times, 0.5, (32, 900), (20, 200))
    return {
        "model": "gpt-oss-20b",
        "hf_overrides": {"sliding_window": 64},
        "async_scheduling": True,
        "num_gpu_blocks": 600,
        "max_num_batched_tokens": 1024,
    }


def hybrid_async_five_to_one(b: _Builder) -> dict:
    """Async scheduling on Gemma 3 12B (windows overridden to 256, 32-token blocks),
    shared system prompts longer than the window."""
    systems = _system_prompts(b, 2, 300, 700, 900)
    times = b.poisson_times(90, 8.0)
    _behind_system_prompts(b, systems, times, 0.6, (50, 900), (20, 200))
    return {
        "model": "gemma-3-12b",
        "hf_overrides": {"sliding_window": 256},
        "block_size": 32,
        "async_scheduling": True,
        "num_gpu_blocks": 1200,
    }


# name -> (seed, builder)
# ---------------------------------------------------------------- P/D streams
# One instance of a disaggregated pair each, with vLLM's NIXL connector: a decode
# instance (kv_consumer) gets requests whose prompt KV it reads from a prefill instance,
# at the time the prefill finished; a prefill instance (kv_producer) gets one-token
# requests whose blocks it holds until a decode instance has read them. Reads take
# latency_s + block_s per block (pd_worker.py stands in for the worker side).

PD_READ = {"latency_s": 0.002, "block_s": 0.0001}


def _pd(role: str, **overrides) -> dict:
    return {"kv_role": role, "kv_read": dict(PD_READ), "kv_lease_s": 30, **overrides}


def pd_decode_light(b: _Builder) -> dict:
    """Hand-offs at a light rate: each read starts when its blocks are allocated and
    the last prompt token is computed locally once it ended."""
    for t in b.poisson_times(60, 6.0):
        b.add(t, [[b.unique_key(), b.rng.randint(100, 2000)]], b.rng.randint(16, 160))
    return _pd("kv_consumer", num_gpu_blocks=4096)


def pd_decode_pressure(b: _Builder) -> dict:
    """A small decode pool: reads wait for blocks, running requests are preempted."""
    for t in b.poisson_times(150, 20.0):
        b.add(t, [[b.unique_key(), b.rng.randint(64, 1024)]], b.rng.randint(50, 200))
    return _pd("kv_consumer", num_gpu_blocks=300, kv_read={"latency_s": 0.003, "block_s": 0.0005})


def pd_decode_prefix_hits(b: _Builder) -> dict:
    """Shared system prompts: the decode instance's own prefix hits shorten the reads."""
    systems = [(400 + g, b.rng.randint(256, 1024)) for g in range(6)]
    for t in b.poisson_times(120, 12.0):
        key, length = b.rng.choice(systems)
        prompt = [[key, length], [b.unique_key(), b.rng.randint(16, 400)]]
        b.add(t, prompt, b.rng.randint(8, 96))
    return _pd("kv_consumer", num_gpu_blocks=1500)


def pd_decode_mixed_local(b: _Builder) -> dict:
    """Prefix-aware deciding: short prompts are prefilled on the decode instance in
    chunks beside reads of long ones, under a 512-token budget and some pressure."""
    for t in b.poisson_times(140, 14.0):
        local = b.rng.random() < 0.4
        length = b.rng.randint(64, 400) if local else b.rng.randint(800, 2500)
        b.add(t, [[b.unique_key(), length]], b.rng.randint(16, 128), local=local)
    return _pd("kv_consumer", num_gpu_blocks=700, max_num_batched_tokens=512)


def pd_decode_aborts(b: _Builder) -> dict:
    """Clients giving up under pressure: aborted while queued, while their KV is read
    (its blocks held until the read ends), once it is in and while decoding."""
    for t in b.poisson_times(120, 18.0):
        b.add(t, [[b.unique_key(), b.rng.randint(64, 1024)]], b.rng.randint(50, 200))
    return _pd(
        "kv_consumer",
        num_gpu_blocks=200,
        request_timeout_s=0.8,
        kv_read={"latency_s": 0.003, "block_s": 0.01},
    )


def pd_decode_async(b: _Builder) -> dict:
    """Hand-offs under async scheduling, with some pressure."""
    for t in b.poisson_times(120, 15.0):
        b.add(t, [[b.unique_key(), b.rng.randint(64, 1024)]], b.rng.randint(30, 160))
    return _pd("kv_consumer", num_gpu_blocks=500, async_scheduling=True)


def pd_prefill_light(b: _Builder) -> dict:
    """One-token prefills whose blocks are held until read."""
    for t in b.poisson_times(80, 8.0):
        b.add(t, [[b.unique_key(), b.rng.randint(100, 3000)]], 1)
    return _pd("kv_producer", num_gpu_blocks=4096)


def pd_prefill_pressure(b: _Builder) -> dict:
    """Slow reads fill a small prefill pool with held blocks: admissions wait for them."""
    for t in b.poisson_times(120, 30.0):
        b.add(t, [[b.unique_key(), b.rng.randint(200, 1500)]], 1)
    return _pd(
        "kv_producer",
        num_gpu_blocks=400,
        max_num_batched_tokens=1024,
        kv_read={"latency_s": 0.01, "block_s": 0.004},
    )


def pd_prefill_prefix_hits(b: _Builder) -> dict:
    """Shared prefixes on the prefill side: held blocks stay hits for later prompts."""
    systems = [(500 + g, b.rng.randint(256, 1024)) for g in range(5)]
    for t in b.poisson_times(120, 15.0):
        key, length = b.rng.choice(systems)
        b.add(t, [[key, length], [b.unique_key(), b.rng.randint(16, 300)]], 1)
    return _pd("kv_producer", num_gpu_blocks=800)


def pd_prefill_async(b: _Builder) -> dict:
    """Prefills under async scheduling, held blocks filling the pool at times."""
    for t in b.poisson_times(120, 25.0):
        b.add(t, [[b.unique_key(), b.rng.randint(200, 1500)]], 1)
    return _pd(
        "kv_producer",
        num_gpu_blocks=500,
        async_scheduling=True,
        kv_read={"latency_s": 0.01, "block_s": 0.002},
    )


def pd_prefill_abandoned(b: _Builder) -> dict:
    """Some hand-offs are never read (the decode side gave up): their blocks stay held
    until the lease runs out."""
    for t in b.poisson_times(100, 10.0):
        abandoned = b.rng.random() < 0.2
        b.add(t, [[b.unique_key(), b.rng.randint(200, 1500)]], 1, abandoned=abandoned)
    return _pd("kv_producer", num_gpu_blocks=900, kv_lease_s=2)


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
    "hybrid_all_window": (126, hybrid_all_window),
    "hybrid_multi_turn": (127, hybrid_multi_turn),
    "hybrid_duplicates": (128, hybrid_duplicates),
    "hybrid_async": (129, hybrid_async),
    "hybrid_async_five_to_one": (130, hybrid_async_five_to_one),
    "pd_decode_light": (141, pd_decode_light),
    "pd_decode_pressure": (142, pd_decode_pressure),
    "pd_decode_prefix_hits": (143, pd_decode_prefix_hits),
    "pd_decode_mixed_local": (144, pd_decode_mixed_local),
    "pd_decode_async": (145, pd_decode_async),
    "pd_decode_aborts": (146, pd_decode_aborts),
    "pd_prefill_light": (151, pd_prefill_light),
    "pd_prefill_pressure": (152, pd_prefill_pressure),
    "pd_prefill_prefix_hits": (153, pd_prefill_prefix_hits),
    "pd_prefill_abandoned": (154, pd_prefill_abandoned),
    "pd_prefill_async": (155, pd_prefill_async),
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
