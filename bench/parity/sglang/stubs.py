"""Stub modules that sglang imports at module level but the scheduler never uses.
torchvision: PyPI wheels are CUDA builds, incompatible with torch 2.13.0+cpu.
"""

import enum
import sys
import types


class _Anything:
    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Anything()

    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return _Anything()


def _mod(name, **attrs):
    m = types.ModuleType(name)

    def _ga(n):
        if n.startswith("__"):
            raise AttributeError(n)
        return _Anything

    m.__getattr__ = _ga  # PEP 562
    m.__path__ = []  # make it a package
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    LANCZOS = "lanczos"


def install():
    if "torchvision" in sys.modules:
        return
    # Let transformers decide (and lru_cache) "torchvision unavailable" before the stub exists.
    from transformers.utils import import_utils as _iu

    _iu.is_torchvision_available()
    tv = _mod("torchvision")
    tr = _mod("torchvision.transforms", InterpolationMode=InterpolationMode)
    fn = _mod("torchvision.transforms.functional", InterpolationMode=InterpolationMode)
    tv.transforms = tr
    tr.functional = fn
    for sub in [
        "torchvision.io",
        "torchvision.transforms.v2",
        "torchvision.transforms.v2.functional",
        "torchvision.ops",
    ]:
        _mod(sub)
