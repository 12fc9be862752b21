"""Record the decisions of vLLM's real v1 scheduler over the seeded streams.

Runs inside a venv that has vLLM installed (see bench/parity/README.md), never in
pagesim's own venv.  It drives ``vllm.v1.core.sched.scheduler.Scheduler`` (or
``AsyncScheduler``) the way vLLM's tests/v1/core/utils.py ``create_scheduler``
builds it, with a fake model runner that samples one token for every request that
finished its prompt (or is decoding) in a step, and writes one JSON file per
stream:

    python bench/parity/record.py --vllm-version 0.33.0 --out tests/parity/vllm-0.33.0
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from collections import deque
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import streams as S  # noqa: E402
import vllm_kv_config  # noqa: E402
from pd_worker import PDWorker, pd_transfer_params  # noqa: E402

# Set-iteration order of request-id strings must not depend on the process.
if os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# Pin the V1 model runner: whether V2 is picked depends on triton being
# installed, and it changes a few scheduler paths (recorded in version_notes).
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")

TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 1,
    "vocab_size": 64000,
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-06,
    "torch_dtype": "float16",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _kwargs_for(fn, **kwargs):
    """Keep only the keyword arguments that ``fn`` accepts (APIs move between
    vLLM versions)."""
    params = inspect.signature(fn).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def _model_dir() -> str:
    d = os.path.join(os.environ.get("PAGESIM_PARITY_MODEL_DIR", "/tmp/pagesim-parity-tiny-llama"))
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "config.json")
    text = json.dumps(TINY_CONFIG, indent=1)
    if not os.path.exists(path) or Path(path).read_text() != text:
        with open(path, "w") as f:
            f.write(text)
    return d


class Driver:
    def __init__(self, stream: dict):
        import torch
        import vllm
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output import StructuredOutputManager

        self.stream = stream
        cfg = stream["config"]
        self.cfg = cfg
        self.vllm_version = vllm.__version__
        self.notes: dict = {}

        sched_kwargs = dict(
            max_num_seqs=cfg["max_num_seqs"],
            max_num_batched_tokens=cfg["max_num_batched_tokens"],
            max_model_len=cfg["max_model_len"],
            long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
            max_num_partial_prefills=cfg["max_num_partial_prefills"],
            max_long_partial_prefills=cfg["max_long_partial_prefills"],
            enable_chunked_prefill=cfg["enable_chunked_prefill"],
            policy=cfg["policy"],
            async_scheduling=cfg["async_scheduling"],
            watermark=cfg["watermark"],
            is_encoder_decoder=False,
        )
        accepted = _kwargs_for(SchedulerConfig, **sched_kwargs)
        dropped = sorted(set(sched_kwargs) - set(accepted) - {"is_encoder_decoder"})
        if dropped:
            # The knob does not exist in this version: recorded, not applied.
            self.notes["knobs_not_in_this_version"] = dropped
        scheduler_config = SchedulerConfig(**accepted)
        model = cfg.get("model")  # a real model: vLLM builds its KV cache config itself
        model_config = ModelConfig(
            **_kwargs_for(
                ModelConfig,
                model=vllm_kv_config.model_dir(model) if model else _model_dir(),
                hf_overrides=cfg.get("hf_overrides") or {},
                dtype="bfloat16" if model else "float16",
                seed=42,
                skip_tokenizer_init=True,
                max_model_len=cfg["max_model_len"],
                trust_remote_code=False,
            )
        )
        cache_config = CacheConfig(
            **_kwargs_for(
                CacheConfig,
                block_size=cfg["block_size"],
                gpu_memory_utilization=0.9,
                swap_space=0,
                cache_dtype="auto",
                enable_prefix_caching=cfg["enable_prefix_caching"],
            )
        )
        extra = {}
        try:
            from vllm.config import DeviceConfig

            # Older releases cannot infer a device on a CPU-only build of torch.
            extra["device_config"] = DeviceConfig(device="cpu")
        except Exception:  # noqa: BLE001
            pass
        self.role = cfg.get("kv_role")  # P/D: "kv_producer" (prefill), "kv_consumer" (decode)
        if self.role:
            from vllm.config import KVTransferConfig

            # vLLM's own NIXL connector, built by the scheduler as a P/D instance
            # builds it; only its worker side (the reads) is stood in for (PDWorker).
            extra["kv_transfer_config"] = KVTransferConfig(
                kv_connector="NixlConnector",
                kv_role=self.role,
                kv_connector_extra_config={"kv_lease_duration": cfg["kv_lease_s"]},
            )
        vllm_config = VllmConfig(
            **_kwargs_for(
                VllmConfig,
                scheduler_config=scheduler_config,
                model_config=model_config,
                cache_config=cache_config,
                **extra,
            )
        )
        # The CPU platform hook may rewrite knobs when VllmConfig is built; put
        # back the ones the stream asks for (a GPU engine would keep them).
        sc = vllm_config.scheduler_config
        for k, v in accepted.items():
            if k == "is_encoder_decoder":
                continue
            if hasattr(sc, k) and getattr(sc, k) != v:
                self.notes.setdefault("restored_after_platform_hook", []).append(
                    [k, getattr(sc, k), v]
                )
                setattr(sc, k, v)
        cc = vllm_config.cache_config
        for k, v in (
            ("block_size", cfg["block_size"]),
            ("enable_prefix_caching", cfg["enable_prefix_caching"]),
        ):
            if getattr(cc, k) != v:
                self.notes.setdefault("restored_after_platform_hook", []).append(
                    [k, getattr(cc, k), v]
                )
                setattr(cc, k, v)
        mc = vllm_config.model_config
        if mc.max_model_len != cfg["max_model_len"]:
            mc.max_model_len = cfg["max_model_len"]

        block_size = hash_block_size = cfg["block_size"]
        if model:
            kv_cache_config, block_size, hash_block_size = vllm_kv_config.build(
                vllm_config, cfg["num_gpu_blocks"]
            )
            self.notes["kv_cache_groups"] = vllm_kv_config.describe(kv_cache_config)
            self.notes["prefix_cache_retention_interval"] = (
                kv_cache_config.prefix_cache_retention_interval
            )
            assert not sc.disable_hybrid_kv_cache_manager, "the hybrid KV cache manager is off"
        else:
            kv_cache_config = self._hand_built_config(cfg, torch)
            cache_config.num_gpu_blocks = cfg["num_gpu_blocks"]
        self.hash_block_size = hash_block_size

        if cfg["async_scheduling"]:
            from vllm.v1.core.sched.async_scheduler import AsyncScheduler

            cls = AsyncScheduler
            self.batch_queue_size = 2  # VllmConfig.max_concurrent_batches, PP=1
        else:
            cls = Scheduler
            self.batch_queue_size = 1
        self.sched = cls(
            **_kwargs_for(
                Scheduler.__init__,
                vllm_config=vllm_config,
                kv_cache_config=kv_cache_config,
                log_stats=True,
                structured_output_manager=StructuredOutputManager(vllm_config),
                block_size=block_size,
                hash_block_size=hash_block_size,
            )
        )
        self.notes["use_v2_model_runner"] = bool(getattr(vllm_config, "use_v2_model_runner", False))
        for k in ("scheduler_reserve_full_isl", "watermark"):
            if hasattr(sc, k):
                self.notes.setdefault("effective", {})[k] = getattr(sc, k)

        # Record preemptions in the order the scheduler makes them: through
        # Scheduler._preempt_request where it exists (0.12+), else through the
        # KV cache manager's free(), which schedule() calls only to preempt.
        self._preempted_now: list[str] = []
        self._in_schedule = False
        if hasattr(self.sched, "_preempt_request"):
            orig = self.sched._preempt_request

            def _preempt(request, *a, **kw):
                self._preempted_now.append(request.request_id)
                return orig(request, *a, **kw)

            self.sched._preempt_request = _preempt
        else:
            kvm = self.sched.kv_cache_manager
            orig_free = kvm.free

            def _free(request, *a, **kw):
                if self._in_schedule:
                    self._preempted_now.append(request.request_id)
                return orig_free(request, *a, **kw)

            kvm.free = _free
        self._make_requests()

    # ------------------------------------------------------------ requests
    def _hand_built_config(self, cfg, torch):
        """The KV cache config of a stream without a real model, as vLLM's
        tests/v1/core/utils.py builds it: one full-attention group over the pool."""
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

        spec = FullAttentionSpec(
            **_kwargs_for(
                FullAttentionSpec,
                block_size=cfg["block_size"],
                num_kv_heads=1,
                head_size=1,
                dtype=torch.float32,
            )
        )
        return KVCacheConfig(
            num_blocks=cfg["num_gpu_blocks"],
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
        )

    def _make_requests(self):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core import kv_cache_utils
        from vllm.v1.request import Request

        try:
            from vllm.utils.hashing import sha256
        except ImportError:  # older layouts
            from vllm.utils import sha256
        kv_cache_utils.init_none_hash(sha256)
        hasher = kv_cache_utils.get_request_block_hasher(self.hash_block_size, sha256)

        self.pending: list = []  # (arrival_s, Request)
        self.index_of: dict[str, int] = {}
        self.times: dict[str, dict] = {}
        for j, r in enumerate(self.stream["requests"]):
            tokens = S.expand_prompt(r["prompt"])
            ids = [r["id"]] if r["n"] == 1 else [f"{r['id']}#{c}" for c in range(r["n"])]
            for c, rid in enumerate(ids):
                sp = SamplingParams(
                    max_tokens=r["max_tokens"],
                    ignore_eos=True,
                    extra_args=pd_transfer_params(None if r.get("local") else self.role, rid),
                )
                req = Request(
                    **_kwargs_for(
                        Request.__init__,
                        request_id=rid,
                        prompt_token_ids=list(tokens),
                        sampling_params=sp,
                        pooling_params=None,
                        eos_token_id=None,
                        arrival_time=r["arrival_s"],
                        priority=r["priority"],
                        block_hasher=hasher,
                    )
                )
                self.pending.append((r["arrival_s"], req))
                self.index_of[rid] = j if r["n"] == 1 else S.child_index(j, c)
                self.times[rid] = {
                    "arrival_s": r["arrival_s"],
                    "first_token_s": None,
                    "finished_s": None,
                    "num_preemptions": 0,
                }
        self.requests_by_id = {req.request_id: req for _, req in self.pending}
        self.pd = None
        if self.role:
            abandoned = [r["id"] for r in self.stream["requests"] if r.get("abandoned")]
            self.pd = PDWorker(self.role, self.cfg, self.times, self.requests_by_id, abandoned)
        # Requests join at their arrival time, list order only breaking ties (a stream
        # may list a later group of requests whose arrivals interleave the earlier one).
        self.pending.sort(key=lambda item: item[0])
        self.pending.reverse()  # pop() from the end = the next to arrive

    def _add_arrivals(self, now: float):
        while self.pending and self.pending[-1][0] <= now:
            _, req = self.pending.pop()
            self.sched.add_request(req)

    def _next_arrival(self):
        return self.pending[-1][0] if self.pending else None

    def _next_event(self):
        """The next arrival or, in a P/D stream, the next read to end or client to give
        up (None: none)."""
        events = [self._next_arrival(), self.pd.next_event() if self.pd else None]
        events.append(self._next_deadline())
        events = [t for t in events if t is not None]
        return min(events) if events else None

    def _next_deadline(self):
        """When the next client still waiting gives up (``request_timeout_s`` after its
        arrival; None: no timeout, or none left)."""
        timeout = self.cfg.get("request_timeout_s")
        if timeout is None:
            return None
        left = [
            tm["arrival_s"] + timeout
            for rid, tm in self.times.items()
            if rid in self.sched.requests and not self.requests_by_id[rid].is_finished()
        ]
        return min(left) if left else None

    def _abort_due(self, now: float) -> None:
        """Abort the requests whose clients gave up by ``now``, as vLLM's engine core
        handles aborts between steps (``finish_requests`` with FINISHED_ABORTED)."""
        timeout = self.cfg.get("request_timeout_s")
        if timeout is None:
            return
        from vllm.v1.request import RequestStatus

        due = sorted(
            (tm["arrival_s"] + timeout, rid)
            for rid, tm in self.times.items()
            if tm["arrival_s"] + timeout <= now
            and rid in self.sched.requests
            and not self.requests_by_id[rid].is_finished()
        )
        for _, rid in due:
            self.sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
            self.times[rid]["aborted_s"] = now

    # ------------------------------------------------------------ loop
    def run(self) -> dict:
        from vllm.v1.outputs import ModelRunnerOutput

        sched = self.sched
        st = self.stream["step_time"]
        steps: list[dict] = []
        queue: deque = deque()  # in-flight steps, newest at the left (as EngineCore)
        now = 0.0
        gpu_free_at = 0.0
        cpu = 0.0
        n_sched_calls = 0

        while True:
            if sched.has_requests() or (self.pending and not queue):
                self._add_arrivals(now)
                self._abort_due(now)
            if sched.has_requests():
                running_before = {r.request_id for r in sched.running}
                known = {
                    rid: r.num_tokens + getattr(r, "num_output_placeholders", 0)
                    for rid, r in sched.requests.items()
                }
                self._preempted_now = []
                self._in_schedule = True
                c0 = time.process_time()
                out = sched.schedule()
                cpu += time.process_time() - c0
                self._in_schedule = False
                n_sched_calls += 1
                nst = out.num_scheduled_tokens
                total = out.total_num_scheduled_tokens
                # Requests that sample this step (as the model runner decides):
                # the chunk reaches the end of the tokens known before this step
                # (prompt, + outputs when resumed, + in-flight placeholders).
                sampling = []
                for rid in nst:
                    req = self.requests_by_id[rid]
                    samples = req.num_computed_tokens >= known[rid]
                    if hasattr(req, "is_prefill_chunk"):
                        assert samples == (not req.is_prefill_chunk), rid
                    if samples:
                        sampling.append(rid)
                dur = S.step_seconds(st, total, len(nst)) if total > 0 else 0.0
                t_start = max(now, gpu_free_at)
                t_end = t_start + dur
                gpu_free_at = t_end
                if self.pd:
                    self.pd.after_schedule(sched, t_start)
                new = [rid for rid in nst if rid not in running_before]
                rec = None
                if total > 0 or self._preempted_now:
                    rec = {
                        "t_start": t_start,
                        "t_end": t_end,
                        "scheduled": dict(nst),
                        "preempted": list(self._preempted_now),
                        "new": new,
                        "prefix_hits": {
                            rid: self.requests_by_id[rid].num_computed_tokens - nst[rid]
                            for rid in new
                        },
                        "free_blocks": sched.kv_cache_manager.block_pool.get_num_free_blocks(),
                        "finished": [],
                    }
                    steps.append(rec)
                queue.appendleft((out, sampling, t_end, rec))
                idle = total == 0 and not any(q[0].total_num_scheduled_tokens for q in queue)
                reads = self.pd is not None and self.pd.next_event() is not None
                waits = sched.get_num_unfinished_requests() > 0 or reads
                if idle and waits and not self._preempted_now:
                    # Nothing runs and nothing is in flight: the engine would idle (or
                    # step empty, polling its connector) until the next arrival or read.
                    # (A step that only preempted is followed by a schedule at once.)
                    nxt = self._next_event()
                    if nxt is None:
                        raise RuntimeError(f"{self.stream['stream']}: scheduler stuck")
                    now = max(now, nxt)
                if len(queue) < self.batch_queue_size and (total > 0 or sched.has_requests()):
                    continue
            elif not queue:
                nxt = self._next_arrival()
                if nxt is None:
                    break
                now = max(now, nxt)
                continue

            out, sampling, t_end, rec = queue.pop()
            now = max(now, t_end)
            req_ids = list(out.num_scheduled_tokens)
            sampled = []
            sampling_set = set(sampling)
            for rid in req_ids:
                if rid in sampling_set:
                    req = self.requests_by_id[rid]
                    sampled.append([S.output_token(self.index_of[rid], len(req.output_token_ids))])
                else:
                    sampled.append([])
            mro = ModelRunnerOutput(
                **_kwargs_for(
                    ModelRunnerOutput,
                    req_ids=req_ids,
                    req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
                    sampled_token_ids=sampled,
                    logprobs=None,
                    prompt_logprobs_dict={},
                    pooler_output=[],
                    spec_token_ids=None,
                    kv_connector_output=self.pd.output(now) if self.pd else None,
                )
            )
            c0 = time.process_time()
            sched.update_from_output(out, mro)
            cpu += time.process_time() - c0
            finished_now = []
            for rid in req_ids:
                req = self.requests_by_id[rid]
                tm = self.times[rid]
                if tm["first_token_s"] is None and len(req.output_token_ids) > 0:
                    tm["first_token_s"] = t_end
                # (a prefill instance keeps a finished request whose KV is still read)
                if tm["finished_s"] is None and (rid not in sched.requests or req.is_finished()):
                    tm["finished_s"] = t_end
                    finished_now.append(rid)
                    if rec is not None:
                        rec["finished"].append(rid)
            if self.pd:
                self.pd.after_output(finished_now, t_end)
        npre: dict[str, int] = {}
        for rec in steps:
            for rid in rec["preempted"]:
                npre[rid] = npre.get(rid, 0) + 1
        for rid, tm in self.times.items():
            tm["num_preemptions"] = npre.get(rid, 0)
            if hasattr(self.requests_by_id[rid], "num_preemptions"):
                assert self.requests_by_id[rid].num_preemptions == tm["num_preemptions"], rid
            assert tm["finished_s"] is not None or "aborted_s" in tm, (self.stream["stream"], rid)
        return {
            "steps": steps,
            "cpu": {"steps": len(steps), "schedule_calls": n_sched_calls, "scheduler_cpu_s": cpu},
        }


# ---------------------------------------------------------------- output


def _dump(obj) -> str:
    return json.dumps(obj, sort_keys=False, separators=(", ", ": "))


def render(doc: dict) -> str:
    lines = ["{"]
    keys = list(doc)
    for i, k in enumerate(keys):
        comma = "," if i < len(keys) - 1 else ""
        v = doc[k]
        if k in ("requests", "steps") and v:
            lines.append(f" {json.dumps(k)}: [")
            for j, item in enumerate(v):
                lines.append("  " + _dump(item) + ("," if j < len(v) - 1 else ""))
            lines.append(" ]" + comma)
        elif k == "request_times" and v:
            lines.append(f" {json.dumps(k)}: {{")
            items = list(v.items())
            for j, (rid, tm) in enumerate(items):
                lines.append(
                    f"  {json.dumps(rid)}: {_dump(tm)}" + ("," if j < len(items) - 1 else "")
                )
            lines.append(" }" + comma)
        else:
            lines.append(f" {json.dumps(k)}: {_dump(v)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def record_stream(name: str) -> tuple[dict, dict]:
    stream = S.build_stream(name)
    drv = Driver(stream)
    result = drv.run()
    config = dict(stream["config"])
    config["version_notes"] = drv.notes
    doc = {
        "format": "pagesim-parity",
        "version": 1,
        "vllm_version": drv.vllm_version,
        "stream": name,
        "seed": stream["seed"],
        "config": config,
        "step_time": stream["step_time"],
        "requests": stream["requests"],
        "steps": result["steps"],
        "request_times": drv.times,
        "cpu": result["cpu"],
    }
    return doc, result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-version", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--streams", default="", help="comma-separated subset (default: all)")
    args = ap.parse_args(argv)
    import vllm

    if vllm.__version__ != args.vllm_version:
        print(f"installed vllm is {vllm.__version__}, not {args.vllm_version}", file=sys.stderr)
        return 2
    names = [s for s in args.streams.split(",") if s] or list(S.STREAMS)
    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    for done, name in enumerate(names, start=1):
        doc, result = record_stream(name)
        with open(os.path.join(args.out, f"{name}.json"), "w") as f:
            f.write(render(doc))
        steps = doc["steps"]
        npre = sum(len(s["preempted"]) for s in steps)
        hits = sum(sum(s["prefix_hits"].values()) for s in steps)
        nsched = sum(len(s["scheduled"]) for s in steps)
        cpu = doc["cpu"]["scheduler_cpu_s"]
        elapsed = time.monotonic() - started
        left = elapsed / done * (len(names) - done)  # streams differ: a rough figure
        print(
            f"[{done}/{len(names)}, {elapsed:.0f} s, about {left:.0f} s left] "
            f"{name}: steps={len(steps)} preemptions={npre} prefix_hit_tokens={hits} "
            f"cpu={cpu:.3f}s per_step={1e6 * cpu / max(len(steps), 1):.0f}us "
            f"per_sched_req={1e6 * cpu / max(nsched, 1):.1f}us",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
