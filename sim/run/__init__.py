"""A run, end to end: build the parts a scenario names (:mod:`.build`), simulate and
write the results (:mod:`.simulate`), with a progress bar (:mod:`.progress`)."""

from sim.run.runner import RunResult, simulate, write_run

__all__ = ["RunResult", "simulate", "write_run"]
