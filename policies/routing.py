"""Routing policies: which replica serves an arriving request."""

from policies.registry import Registry

ROUTERS: Registry = Registry("router")
