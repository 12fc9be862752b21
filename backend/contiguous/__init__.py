"""Contiguous reservation baselines (allocator.py): one first-fit region per request,
sized by a reservation mode (modes.py), in an address space of holes (slot_space.py)."""

from backend.contiguous.allocator import ContiguousAllocator, make_contiguous
from backend.contiguous.modes import MODES, NAMES
from backend.contiguous.slot_space import SlotSpace

__all__ = ["MODES", "NAMES", "ContiguousAllocator", "SlotSpace", "make_contiguous"]
