"""The profile-driven cost model: step time interpolated from measured GPU profiles.

``cost_model: {kind: profile, format: vidur, path: DIR}`` predicts each step from Vidur's
published per-operator measurements (:mod:`sim.costs.vidur`): no model is trained, so
there is no cold start. Per step::

    step = L x (sum of the per-layer operators at T tokens          # mlp.csv
                + prefill attention + KV save of each chunk         # attention.csv
                + decode attention at (decodes, mean context)       #   (as Vidur does)
                + KV save of the decodes
                + 2 all-reduces of T x hidden)                      # all_reduce.csv, tp > 1
           + embedding(T)                                           # mlp.csv
           + LM head and sampling(S) + block moves                  # analytic
           + CPU overhead(S)                                        # cpu_overheads.csv

Each part comes from the profile when the step lies inside its measured grid, and from
the analytic model (:class:`sim.costs.analytic.AnalyticCostModel`) otherwise; the steps that
fell back are counted per part (:attr:`ProfileCostModel.fallback_steps`) and reported in
summary.json, so a run that mostly extrapolated says so. Vidur's profiles do not measure
the LM head, sampling or block copies, so those are always analytic (not counted).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from backend.step import Batch
from backend.transfer import NO_MOVES, MovedBlocks
from sim.costs.analytic import AnalyticCostModel, StepCost
from sim.costs.vidur import VidurProfile

__all__ = ["PARTS", "ProfileCostModel"]

#: The parts of a step the profile can supply, as counted in ``fallback_steps``.
PARTS = ("dense", "prefill_attention", "decode_attention", "all_reduce", "cpu")
_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
_NO_DECODES = np.zeros(0, dtype=np.int64)


class ProfileCostModel:
    """An Executor interpolating ``profile``, with ``analytic`` outside its grid.

    ``execute`` mutates only the caches and the fallback counters."""

    reads_token_ids = False  # a step's time depends on its shape, not on the tokens

    def __init__(self, profile: VidurProfile, analytic: AnalyticCostModel):
        self.profile, self.analytic = profile, analytic
        self.model = analytic.model
        self.num_steps = 0
        self.fallback_steps: Counter[str] = Counter({part: 0 for part in PARTS})
        self._stretch_counts: list[tuple[int, Counter[str]]] = []  # (sim.engine.fast_forward)
        self._dense: dict[int, tuple[float, float, float] | None] = {}
        #: parts the profile has no data for at all (always analytic, not counted)
        self.analytic_parts = [
            part
            for part, missing in (
                ("prefill_attention", profile.prefill_attention is None),
                ("decode_attention", profile.decode_attention is None),
                ("all_reduce", analytic.tensor_parallel > 1 and profile.all_reduce is None),
                ("cpu", profile.cpu_overhead is None),
            )
            if missing
        ]

    def execute(self, batch: Batch) -> float:
        """Seconds for ``batch`` (the Executor seam); an empty batch takes 0."""
        return self.breakdown(*batch.shape(self.analytic.blocks_per_unit)).total_s

    def decode_steps(self, context_lens: np.ndarray, steps: int) -> np.ndarray:
        """Seconds of each step of a decode stretch, as ``execute`` gives them one by one
        (see :meth:`sim.costs.analytic.AnalyticCostModel.decode_steps`). Counts nothing
        until :meth:`stretch_ran` says how many of them ran."""
        before = (self.num_steps, Counter(self.fallback_steps))
        counts = []  # (num_steps, fallback_steps) after each step
        times = []
        for i in range(steps):
            times.append(self.predict([], context_lens + i))
            counts.append((self.num_steps, Counter(self.fallback_steps)))
        self.num_steps, self.fallback_steps = before
        self._stretch_counts = [(n - before[0], c - before[1]) for n, c in counts]
        return np.array(times)

    def stretch_ran(self, steps: int) -> None:
        """Count the first ``steps`` steps of the latest stretch priced (they ran)."""
        if steps > 0:
            ran, fallbacks = self._stretch_counts[steps - 1]
            self.num_steps += ran
            self.fallback_steps.update(fallbacks)
        self._stretch_counts = []

    def predict(self, *shape, **moved) -> float:
        """Same arguments as :meth:`sim.costs.analytic.AnalyticCostModel.predict`."""
        return self.breakdown(*shape, **moved).total_s

    def breakdown(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        decode_context_lens: np.ndarray,
        moved: MovedBlocks = NO_MOVES,
    ) -> StepCost:
        """Like :meth:`AnalyticCostModel.breakdown`, each part from the profile where
        it was measured. Counts the step and its fallbacks."""
        base = self.analytic.breakdown(prefill_chunks, decode_context_lens, moved=moved)
        num_decodes = int(decode_context_lens.shape[0])
        num_seqs = len(prefill_chunks) + num_decodes
        if num_seqs == 0:
            return base
        self.num_steps += 1
        layers = self.model.num_layers
        tokens = sum(n for _, n in prefill_chunks) + num_decodes
        dense = self._dense_s(tokens)
        if dense is None:
            self.fallback_steps["dense"] += 1
            linear, elementwise, allreduce = base.linear_s, base.elementwise_s, base.allreduce_s
        else:
            linear, elementwise, allreduce = dense
            if allreduce is None:
                self.fallback_steps["all_reduce"] += 1
                allreduce = base.allreduce_s
        prefill = self._prefill_s(prefill_chunks)
        decode = self._decode_s(decode_context_lens)
        cpu = self._cpu_s(num_seqs)
        return StepCost(
            linear,
            elementwise,
            base.prefill_attention_s if prefill is None else layers * prefill,
            base.decode_attention_s if decode is None else layers * decode,
            base.lm_head_s,
            allreduce,
            base.data_movement_s,
            base.cpu_s if cpu is None else cpu,
        )

    def report(self) -> dict:
        """What summary.json records about this model (JSON-ready)."""
        return {
            "kind": "profile",
            "source": self.profile.source,
            "files": list(self.profile.files),
            "steps": self.num_steps,
            "fallback_steps": dict(self.fallback_steps),
            "analytic_parts": ["lm_head", "data_movement", *self.analytic_parts],
        }

    # -- parts ----------------------------------------------------------------------------
    def _dense_s(self, tokens: int) -> tuple[float, float, float | None] | None:
        """(GEMMs, elementwise incl. embedding, all-reduce) of all layers from mlp.csv,
        None outside its grid; the all-reduce None when it must come from elsewhere."""
        if tokens in self._dense:
            return self._dense[tokens]
        times = {op: table(tokens) for op, table in self.profile.dense.items()}
        embedding = self.profile.embedding(tokens) if self.profile.embedding else 0.0
        result = None
        if None not in times.values() and embedding is not None:
            layers = self.model.num_layers
            linear = layers * sum(times[op] for op in _GEMMS)
            elementwise = layers * (sum(times.values()) - linear / layers) + embedding
            result = (linear, elementwise, self._allreduce_s(tokens))
        self._dense[tokens] = result
        return result

    def _allreduce_s(self, tokens: int) -> float | None:
        if self.analytic.tensor_parallel == 1:
            return 0.0
        if self.profile.all_reduce is None:
            return self.analytic.breakdown([(0, tokens)], _NO_DECODES).allreduce_s
        nbytes = tokens * self.model.hidden_size * self.model.dtype_bytes
        one = self.profile.all_reduce(nbytes)
        return None if one is None else 2 * self.model.num_layers * one

    def _prefill_s(self, chunks: Sequence[tuple[int, int]]) -> float | None:
        """Per-layer prefill attention and KV save of every chunk; None (counted) when
        any chunk lies outside the grid."""
        if not chunks:
            return 0.0
        grid, save = self.profile.prefill_attention, self.profile.prefill_kv_save
        if grid is None:
            return None  # not profiled at all: analytic, not a fallback
        total = 0.0
        for cached, new in chunks:
            attention = grid(cached, new)
            kv_save = save(new) if save is not None else 0.0
            if attention is None or kv_save is None:
                self.fallback_steps["prefill_attention"] += 1
                return None
            total += attention + kv_save
        return total

    def _decode_s(self, contexts: np.ndarray) -> float | None:
        """Per-layer decode attention at (batch, mean context), as Vidur predicts it."""
        count = int(contexts.shape[0])
        if count == 0:
            return 0.0
        grid, save = self.profile.decode_attention, self.profile.decode_kv_save
        if grid is None:
            return None  # not profiled at all: analytic, not a fallback
        attention = grid(count, float(contexts.mean()))
        kv_save = save(count) if save is not None else 0.0
        if attention is None or kv_save is None:
            self.fallback_steps["decode_attention"] += 1
            return None
        return attention + kv_save

    def _cpu_s(self, num_seqs: int) -> float | None:
        table = self.profile.cpu_overhead
        if table is None:
            return None  # not profiled at all: analytic, not a fallback
        value = table(num_seqs)
        if value is None:
            self.fallback_steps["cpu"] += 1
        return value
