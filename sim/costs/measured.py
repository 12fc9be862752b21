"""Step time, measured: the real torch/Triton backend as the engine's executor.

The SimPy clock then advances by measured step times (hardware in the loop). Imported
only when a scenario asks for ``backend.kind: torch``, so the simulator itself never
needs torch.
"""

from __future__ import annotations

from backend.transfer import Medium
from sim.config.errors import ScenarioError


def build_torch_executor(scenario, allocator, *, cpu_threads: int = 1):
    """A PagedExecutor for ``allocator``'s pool with the scenario's model shape (random
    weights from the scenario's seed), running on a CPU with ``cpu_threads`` torch threads.
    Raises ScenarioError for what cannot run here."""
    source = scenario.name  # (a paged allocator: sim.config.combinations refuses others)
    try:
        import torch

        from backend.real.paged_executor import PagedExecutor
    except ImportError as err:
        raise ScenarioError(
            f"{source}: backend.kind: torch needs torch installed ({err}); install the 'real' extra"
        ) from None
    device = scenario.backend.device
    if device == "cuda" and not torch.cuda.is_available():
        raise ScenarioError(f"{source}: backend.device: cuda, but no CUDA device is available")
    return PagedExecutor.from_spec(
        scenario.model,
        allocator,
        device=device,
        dtype=getattr(torch, scenario.backend.dtype),  # the schema allows torch dtype names
        seed=scenario.simulation.seed,
        # On a small shared CPU torch's worker threads spin-wait for each other and turn
        # a few-ms step into 100+ ms; one thread (the default) gives stable timings.
        cpu_threads=cpu_threads if device == "cpu" else None,
        tier_blocks={
            Medium(tier.tier): blocks
            for tier, blocks in zip(scenario.cache.offload, scenario.kv_pool.offload_blocks)
        },
    )
