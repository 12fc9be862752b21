"""Scheduling policies: which waiting and running requests get this step's token budget."""

from policies.registry import Registry

SCHEDULERS: Registry = Registry("scheduler")
