"""Prefix-cache eviction policies: which cached-evictable block is reclaimed first."""

from policies.registry import Registry

EVICTORS: Registry = Registry("eviction")
