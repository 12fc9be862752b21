"""The real executor: runs an engine step (backend.step.Batch) on the paged KV pool.

Hardware in the loop: ``execute`` returns the measured seconds (CUDA events on a GPU,
``perf_counter`` on the CPU) and the SimPy clock advances by them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
import torch

from backend.base import Allocator
from backend.real import ops
from backend.real.kv_cache import KVCache, slot_mapping
from backend.real.model import LlamaModel
from backend.real.shape import ModelShape
from backend.step import Batch
from backend.transfer import CPU, Medium


class StepInputs(NamedTuple):
    """The flattened step: prefill chunk tokens first, then one token per decode."""

    token_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    slots: torch.Tensor  # [T] int64, flat slot each token's K/V is written to
    num_prefill_tokens: int
    prefill_tables: torch.Tensor  # [chunks, max_blocks] int32
    query_start_loc: torch.Tensor  # [chunks + 1] int32
    context_starts: torch.Tensor  # [chunks] int32
    decode_tables: torch.Tensor  # [decodes, max_blocks] int32
    context_lens: torch.Tensor  # [decodes] int32
    sample_rows: torch.Tensor  # [samples] int64: last row of each chunk, every decode row
    sample_seq_ids: list[int]
    chunk_lens: tuple[int, ...]  # host copies of the metadata, so kernels need no sync
    max_context_len: int


class PagedExecutor:
    """Runs steps for real on a KV pool indexed by ``allocator``'s block ids.

    The allocator is only read (``block_table``, ``block_size``, ``num_blocks``,
    ``num_cpu_blocks``); the engine mutates it before each step. On the CPU,
    ``cpu_threads`` (if given) is torch's thread count during a step. After each step
    ``last_sampled`` / ``last_logits`` map the sampled sequences to their greedy token and
    logits (every prefill chunk's last token and every decode).
    """

    def __init__(
        self,
        shape: ModelShape,
        allocator: Allocator,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32,
        seed: int = 0,
        use_triton: bool | None = None,
        cpu_threads: int | None = None,
        tier_blocks: Mapping[Medium, int] = MappingProxyType({}),
    ):
        if isinstance(dtype, str):  # scenario files name dtypes: "float32", "bfloat16"
            dtype = getattr(torch, dtype)
        self.shape = shape
        self.allocator = allocator
        self.device = torch.device(device)
        if use_triton is None:  # Triton on a GPU, torch on the CPU (the interpreter is slow)
            use_triton = self.device.type == "cuda" and ops.triton_usable(self.device)
        self.use_triton = bool(use_triton)
        self.model = LlamaModel(shape, device=self.device, dtype=dtype, seed=seed)
        self.kv = KVCache(
            shape,
            allocator.num_blocks,
            allocator.block_size,
            # one CPU pool: the swap space's blocks, then the CPU offload tier's (a KV
            # connector's tiers, ``tier_blocks``: their sizes by medium)
            num_cpu_blocks=allocator.num_cpu_blocks + tier_blocks.get(CPU, 0),
            lower_tier_blocks={m: n for m, n in tier_blocks.items() if m is not CPU},
            device=self.device,
            dtype=dtype,
            use_triton=self.use_triton,
        )
        # torch's intra-op threads spin-wait; on a shared CPU that turns a 4 ms tiny-model
        # step into 100+ ms. ``cpu_threads`` caps them for the step (then restores them).
        self.cpu_threads = cpu_threads
        self.last_sampled: dict[int, int] = {}
        self.last_logits: dict[int, torch.Tensor] = {}

    @classmethod
    def from_spec(cls, spec, allocator: Allocator, **kwargs) -> PagedExecutor:
        """Build from any model spec object with ModelShape's attribute names."""
        return cls(ModelShape.from_spec(spec), allocator, **kwargs)

    # -- the step ------------------------------------------------------------------------
    def execute(self, batch: Batch) -> float:
        """Perform the batch's block moves (swap-out, swap-in, loads from an offload
        tier, copy-on-write, in that order), then the forward pass, writing K/V through
        the block tables and sampling greedily, then the stores to an offload tier.
        Returns the measured seconds. Mutates the KV pool and ``last_*``.
        Raises ValueError if a token lies beyond its sequence's block table."""
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
            start.record()
            self._step(batch)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        previous = torch.get_num_threads()
        if self.cpu_threads:
            torch.set_num_threads(self.cpu_threads)
        try:
            began = time.perf_counter()
            self._step(batch)
            return time.perf_counter() - began
        finally:
            torch.set_num_threads(previous)

    def _step(self, batch: Batch) -> None:
        self.kv.transfer(batch.transfers)
        self.last_sampled, self.last_logits = {}, {}
        if batch.batch_size:
            self._forward(batch)
        if batch.stores:  # to an offload tier: KV this step's forward computed
            self.kv.transfer(batch.stores)

    def _forward(self, batch: Batch) -> None:
        inputs = self.prepare(batch)
        with torch.inference_mode():
            hidden = self.model.forward(inputs.token_ids, inputs.positions, self._attend_fn(inputs))
            logits = self.model.logits(hidden[inputs.sample_rows])
        tokens = logits.argmax(dim=-1).tolist()
        self.last_sampled = dict(zip(inputs.sample_seq_ids, tokens, strict=True))
        self.last_logits = dict(zip(inputs.sample_seq_ids, logits.unbind(0), strict=True))

    def _attend_fn(self, inputs: StepInputs):
        kv, use_triton, scale = self.kv, self.use_triton, self.model.scale
        split = inputs.num_prefill_tokens

        def attend(layer, query, key, value):
            key_cache, value_cache = kv.key_cache(layer), kv.value_cache(layer)
            ops.write_kv(key, value, key_cache, value_cache, inputs.slots, use_triton=use_triton)
            out = torch.empty_like(query)
            if split:
                ops.paged_prefill_attention(
                    query[:split],
                    key_cache,
                    value_cache,
                    inputs.prefill_tables,
                    inputs.query_start_loc,
                    inputs.context_starts,
                    scale,
                    use_triton=use_triton,
                    out=out[:split],
                    chunk_lens=inputs.chunk_lens,
                )
            if split < query.shape[0]:
                ops.paged_decode_attention(
                    query[split:],
                    key_cache,
                    value_cache,
                    inputs.decode_tables,
                    inputs.context_lens,
                    scale,
                    use_triton=use_triton,
                    out=out[split:],
                    max_context_len=inputs.max_context_len,
                )
            return out

        return attend

    # -- flattening the batch ----------------------------------------------------------------
    def prepare(self, batch: Batch) -> StepInputs:
        """Flatten a batch into model inputs and attention metadata. No mutation.
        Raises ValueError for a token id outside the vocabulary or a position beyond its
        sequence's block table."""
        size = self.allocator.block_size
        chunk_ids = [c.seq_id for c in batch.prefills]
        chunk_tables = [self.allocator.block_table(seq) for seq in chunk_ids]
        decode_ids = [int(s) for s in batch.decode_seq_ids]
        decode_tables = [self.allocator.block_table(s) for s in decode_ids]
        context_lens = np.asarray(batch.decode_context_lens, dtype=np.int64)

        chunk_lens = [c.num_tokens for c in batch.prefills]
        bounds = np.concatenate([[0], np.cumsum(chunk_lens, dtype=np.int64)])
        num_prefill = int(bounds[-1])
        # Token i of the prefill part belongs to chunk prefill_rows[i].
        prefill_rows = np.repeat(np.arange(len(chunk_lens)), chunk_lens)
        starts = np.array([c.start for c in batch.prefills], dtype=np.int64)
        prefill_pos = starts[prefill_rows] + np.arange(num_prefill) - bounds[prefill_rows]
        decode_pos = context_lens - 1
        prefill_tables, prefill_blocks = _pad(chunk_tables)
        decode_tables_2d, decode_blocks = _pad(decode_tables)
        decode_rows = np.arange(len(decode_ids))
        prefill_slots = slot_mapping(
            prefill_tables, prefill_blocks, prefill_rows, prefill_pos, size, chunk_ids
        )
        decode_slots = slot_mapping(
            decode_tables_2d, decode_blocks, decode_rows, decode_pos, size, decode_ids
        )
        slots = np.concatenate([prefill_slots, decode_slots])
        tokens = [np.asarray(c.token_ids, dtype=np.int64) for c in batch.prefills]
        tokens.append(np.asarray(batch.decode_token_ids, dtype=np.int64))
        all_tokens = np.concatenate(tokens)
        if all_tokens.size and not 0 <= int(all_tokens.min()) <= int(all_tokens.max()) < (
            self.shape.vocab_size
        ):
            raise ValueError(f"token ids must lie in the vocabulary [0, {self.shape.vocab_size})")
        sample_rows = np.concatenate([bounds[1:] - 1, num_prefill + np.arange(len(decode_ids))])
        dev = self.device

        def as_tensor(array, dtype=torch.int64):
            return torch.as_tensor(np.asarray(array), dtype=dtype).to(dev)

        return StepInputs(
            token_ids=as_tensor(all_tokens),
            positions=as_tensor(np.concatenate([prefill_pos, decode_pos])),
            slots=as_tensor(slots),
            num_prefill_tokens=num_prefill,
            prefill_tables=as_tensor(prefill_tables, torch.int32),
            query_start_loc=as_tensor(bounds, torch.int32),
            context_starts=as_tensor(starts, torch.int32),
            decode_tables=as_tensor(decode_tables_2d, torch.int32),
            context_lens=as_tensor(context_lens, torch.int32),
            sample_rows=as_tensor(sample_rows),
            sample_seq_ids=chunk_ids + decode_ids,
            chunk_lens=tuple(chunk_lens),
            max_context_len=int(context_lens.max()) if context_lens.size else 0,
        )


def _pad(tables: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Block tables as one rectangular array, padded with block 0 (a valid id that the
    kernels gather but mask), and each table's real length."""
    lengths = np.array([len(table) for table in tables], dtype=np.int64)
    out = np.zeros((len(tables), int(lengths.max(initial=0)) or 1), dtype=np.int32)
    for row, table in enumerate(tables):
        out[row, : len(table)] = table
    return out, lengths
