"""Drive sglang 0.5.23's real Scheduler on CPU with a fake TpModelWorker (no forward pass).

Groundwork for recording SGLang's scheduling decisions as tests/parity/ does vLLM's: it
runs, but nothing records its steps yet and pagesim has no ``sglang`` profile. The stubs
must be installed before sglang is imported, hence the late imports.
"""

# ruff: noqa: E402

import argparse
import os
import sys
import time
import types

if __name__ == "__main__":  # --help before SGLang (another venv) is imported
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stubs

stubs.install()
import warnings

warnings.filterwarnings("ignore")
import torch
from sglang.srt.distributed import bootstrap
from sglang.srt.managers import scheduler as sched_mod
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.runtime_context import SpawnRanks, get_context, get_parallel, get_schedule, publish
from sglang.srt.server_args import PortArgs, ServerArgs

# CPU thread binding / sgl_kernel shm all-reduce init: not needed for a 1-rank sim.
bootstrap._bind_threads_if_cpu = lambda device: None
bootstrap._init_cpu_threads_env = lambda **kw: None

KV_TOKENS = int(os.environ.get("KV_TOKENS", 16384))
MAX_REQS = int(os.environ.get("MAX_REQS", 256))
CTX = 4096
PAGE = int(os.environ.get("PAGE", 1))


class FakeModelRunner:
    def __init__(self, model_config):
        self.model_config = model_config
        self.device = "cpu"
        self.req_to_token_pool = ReqToTokenPool(MAX_REQS, CTX, "cpu", False)
        # Tiny real KV buffers: 1 layer, 1 head, head_dim 1 -> a few KB.
        self.token_to_kv_pool = MHATokenToKVPool(
            KV_TOKENS, PAGE, torch.float16, 1, 1, 1, "cpu", False
        )
        if PAGE == 1:
            self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(
                KV_TOKENS, torch.float16, "cpu", self.token_to_kv_pool, need_sort=False
            )
        else:
            from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator

            self.token_to_kv_pool_allocator = PagedTokenToKVPoolAllocator(
                KV_TOKENS, PAGE, torch.float16, "cpu", self.token_to_kv_pool, need_sort=False
            )
        self.is_hybrid_swa = False
        self.sliding_window_size = None
        self.mtp_draft_device_pools = ()
        self.mtp_draft_mamba_pools = ()
        self.canary_manager = None
        self.forward_stream = None
        self.attn_backend = types.SimpleNamespace()
        self.prefill_aware_swa = False
        self.max_running_requests = MAX_REQS
        self.logical_max_total_num_tokens = KV_TOKENS
        self.effective_logical_max_total_num_tokens = KV_TOKENS
        self.model = types.SimpleNamespace()
        from sglang.srt.model_executor.model_runner_components.ngram_embedding_manager import (
            NgramEmbeddingManager,
        )

        self.ngram_embedding_manager = NgramEmbeddingManager.from_model(
            model=self.model,
            model_config=model_config,
            req_to_token_pool=self.req_to_token_pool,
            max_running_requests=MAX_REQS,
            device="cpu",
        )


class FakeTpWorker:
    def __init__(self, model_config):
        self.model_runner = FakeModelRunner(model_config)
        self.model_config = model_config
        self.device = "cpu"
        self.random_seed = 0
        self.weight_load_time = 0.0
        self.graph_time_usage = {}

    is_hybrid_swa = property(lambda s: False)
    sliding_window_size = property(lambda s: None)

    def get_memory_pool(self):
        return self.model_runner.req_to_token_pool, self.model_runner.token_to_kv_pool_allocator

    def get_pad_input_ids_func(self):
        return None

    def get_worker_info(self):
        return (
            KV_TOKENS,
            get_schedule().max_prefill_tokens,
            MAX_REQS,
            get_schedule().max_queued_requests,
            min(self.model_config.context_len - 1, KV_TOKENS - 1),
            min(self.model_config.context_len - 1, KV_TOKENS - 1) - 5,
            0,
            "cpu",
            None,
            MAX_REQS,
            CTX,
            KV_TOKENS,
        )


class SimScheduler(Scheduler):
    def init_model_worker(self):
        self.tp_worker = FakeTpWorker(self.model_config)
        self.draft_worker = None
        self.model_worker = self.tp_worker
        (
            self.max_total_num_tokens,
            self.max_prefill_tokens,
            self.max_running_requests,
            self.max_queued_requests,
            self.max_req_len,
            self.max_req_input_len,
            self.random_seed,
            self.device,
            self.forward_stream,
            _,
            _,
            _,
        ) = self.tp_worker.get_worker_info()
        self.min_free_slots_delayer = None
        if not get_parallel().pp_max_micro_batch_size:
            get_context().override(
                "scheduler.pp_max_micro_batch_size_default",
                pp_max_micro_batch_size=self.max_running_requests,
            )
        self.tp_group = get_parallel().tp_group
        self.tp_cpu_group = self.tp_group.cpu_group
        self.attn_tp_group = get_parallel().attn_tp_group
        self.attn_tp_cpu_group = self.attn_tp_group.cpu_group
        self.attn_cp_group = get_parallel().attn_cp_group
        self.attn_cp_cpu_group = self.attn_cp_group.cpu_group
        self.pp_group = get_parallel().pp_group
        self.world_group = get_parallel().world_group
        self.dp_tp_group = sched_mod.get_dp_tp_group()
        self.dp_tp_cpu_group = self.dp_tp_group.cpu_group
        self.pad_input_ids_func = None
        self.schedule_stream = None
        self.kv_cache_allocation_time = 0.0
        self.startup_available_gpu_memory_gb = 0.0


TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 1,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _model_dir():
    # ModelConfig.from_server_args only reads config.json (no weights, no tokenizer:
    # skip_tokenizer_init).
    import json
    import tempfile

    d = os.path.join(tempfile.gettempdir(), "sglang_sim_tinyllama")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(TINY_CONFIG, f)
    return d


def build(policy="lpm", chunk=512):
    sa = ServerArgs(
        model_path=_model_dir(),
        device="cpu",
        skip_tokenizer_init=True,
        schedule_policy=policy,
        chunked_prefill_size=chunk,
        max_prefill_tokens=4096,
        page_size=PAGE,
        disable_overlap_schedule=True,
        max_running_requests=MAX_REQS,
        disable_cuda_graph=True,
        enable_mixed_chunk=os.environ.get("MIXED") == "1",
        load_format="dummy",
        attention_backend="torch_native",
    )
    port_args = PortArgs.init_new(sa)
    publish(sa, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    return SimScheduler(sa, port_args)


# ---------------------------------------------------------------- fake forward
import random
from array import array

from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.sampling.sampling_params import SamplingParams


def _fake_forward(self, batch, **kw):
    # One sampled token per request (never EOS=2); requests finish on max_new_tokens.
    bs = len(batch.reqs)
    return GenerationBatchResult(next_token_ids=torch.randint(100, 30000, (bs,), dtype=torch.int64))


FakeTpWorker.forward_batch_generation = _fake_forward


class Collector:
    def __init__(self):
        self.n = 0
        self.finished = []

    def send_output(self, out, *a, **k):
        self.n += 1
        fr = getattr(out, "finished_reasons", None)
        if fr:
            for rid, r in zip(out.rids, fr):
                if r is not None:
                    self.finished.append(rid)


def make_workload(n_req=300, n_groups=8, prefix_len=512, seed=0):
    rng = random.Random(seed)
    prefixes = [[rng.randrange(100, 30000) for _ in range(prefix_len)] for _ in range(n_groups)]
    reqs = []
    for i in range(n_req):
        g = rng.randrange(n_groups)
        ids = prefixes[g] + [rng.randrange(100, 30000) for _ in range(rng.randint(16, 256))]
        sp = SamplingParams(
            max_new_tokens=rng.randint(8, 128),
            ignore_eos=os.environ.get("IGNORE_EOS", "1") == "1",
            temperature=0.0,
        )
        sp.normalize(None)
        sp.verify(32000)
        reqs.append(
            TokenizedGenerateReqInput(
                rid=f"r{i}",
                input_text=None,
                input_ids=array("q", ids),
                input_embeds=None,
                mm_inputs=None,
                token_type_ids=None,
                sampling_params=sp,
                return_logprob=False,
                logprob_start_len=-1,
                top_logprobs_num=0,
                token_ids_logprob=None,
                stream=False,
            )
        )
    return reqs


def run(s, reqs, arrivals_per_step=16, max_steps=100000):
    col = Collector()
    s.output_streamer.send_to_detokenizer = col
    pending = list(reqs)
    stats = dict(
        steps=0,
        prefill_steps=0,
        decode_steps=0,
        idle_steps=0,
        prefill_tokens=0,
        decode_tokens=0,
        input_tokens=sum(len(r.input_ids) for r in reqs),
        retracted=0,
        max_running_bs=0,
    )
    check = os.environ.get("CHECK") == "1"
    trace = []
    step_times = []
    t0 = time.process_time()
    while stats["steps"] < max_steps:
        ts = time.process_time()
        for r in pending[:arrivals_per_step]:
            s.handle_generate_request(r)
        pending = pending[arrivals_per_step:]
        plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch = plan.running_batch
        batch = plan.batch_to_run
        if batch:
            result = s.run_batch(batch)
            s.process_batch_result(batch, result)
            if batch.forward_mode.is_extend():
                stats["prefill_steps"] += 1
                stats["prefill_tokens"] += int(batch.extend_num_tokens)
            else:
                stats["decode_steps"] += 1
                stats["decode_tokens"] += batch.batch_size()
        else:
            stats["idle_steps"] += 1
            s.on_idle()
        s.last_batch = batch
        stats["retracted"] += s.metrics_reporter.num_retracted_reqs or 0
        s.metrics_reporter.num_retracted_reqs = 0
        stats["max_running_bs"] = max(stats["max_running_bs"], s.running_batch.batch_size())
        if batch:
            trace.append(
                (
                    "P" if batch.forward_mode.is_extend() else "D",
                    batch.batch_size(),
                    int(batch.extend_num_tokens or 0)
                    if batch.forward_mode.is_extend()
                    else batch.batch_size(),
                )
            )
        if check:
            s.invariant_checker.self_check_during_busy()
        stats["steps"] += 1
        step_times.append(time.process_time() - ts)
        if (
            not pending
            and not batch
            and not s.waiting_queue
            and s.running_batch.is_empty()
            and s.chunked_req is None
        ):
            break
    stats["cpu_s"] = time.process_time() - t0
    s.on_idle()  # fully idle now: runs sglang's own KV/req-pool leak check (raises on leak)
    stats["trace_head"] = trace[:6]
    stats["finished"] = len(set(col.finished))
    stats["outputs_sent"] = col.n
    stats["ms_per_step_mean"] = 1000 * sum(step_times) / len(step_times)
    st = sorted(step_times)
    stats["ms_per_step_p50"] = 1000 * st[len(st) // 2]
    stats["ms_per_step_max"] = 1000 * st[-1]
    return stats


def main():
    t = time.time()
    s = build(policy=os.environ.get("POLICY", "lpm"), chunk=int(os.environ.get("CHUNK", 512)))
    print(
        f"built scheduler in {time.time() - t:.2f}s; tree_cache={type(s.tree_cache).__name__} "
        f"policy={s.policy.policy} chunked_prefill_size={s.chunked_prefill_size} "
        f"max_prefill_tokens={s.max_prefill_tokens}"
    )
    reqs = make_workload(n_req=int(os.environ.get("N_REQ", 300)))
    stats = run(s, reqs)
    print(stats)
    tc = s.tree_cache
    print(
        "kv available",
        s.token_to_kv_pool_allocator.available_size(),
        "evictable",
        tc.evictable_size(),
        "protected",
        tc.protected_size(),
    )


if __name__ == "__main__":
    main()
