"""Planning one engine step, one concept in one package: the planner (``planner.py``:
admission, decodes, running prefills, preemption), the builder a batching mode composes a
step with (``step_builder.py``), vLLM's running loop (``running_order.py``), what the
builder and the loop may call on the planner (``planner_ops.py``: PlannerOps) and the offers a
step makes to batching modes (``offers.py``)."""

from sim.engine.planning.planner import StepPlanner

__all__ = ["StepPlanner"]
