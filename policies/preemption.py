"""Preemption victim policies: who loses its KV memory on a free-list miss."""

from policies.registry import Registry

VICTIMS: Registry = Registry("preemption victim")
