"""Pluggable policies, each family a registry keyed by name."""

from policies.registry import Registry, UnknownPolicy

__all__ = ["Registry", "UnknownPolicy"]
