"""A run, end to end: build the parts a scenario names (:mod:`.build`), simulate and
write the results (:mod:`.runner`), with a progress bar (:mod:`.progress`) and run
folders (:mod:`.folders`).

The names below are imported on first use, so that a command checking an output path
(sim.run.folders) does not load the whole simulator first."""

__all__ = ["RunResult", "simulate", "write_run"]


def __getattr__(name: str):
    if name in __all__:
        from sim.run import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'sim.run' has no attribute {name!r}")
