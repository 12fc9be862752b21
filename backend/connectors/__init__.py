"""KV connectors beside an allocator: the contract (contract.py), what a scheduler does with
one (seam.py), and the offload tiers below the device pool (offload.py)."""
