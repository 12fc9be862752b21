"""What the allocator state machine draws (machine.py): prompts that share prefixes,
appended tokens, and the KV cache groups of an allocator that keeps several."""

from __future__ import annotations

from hypothesis import strategies as st

from backend.base import KVGroup

PREFIXES = ((1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4, 9, 9, 9, 9), (5, 5, 5, 5, 5, 5, 5, 5))
TOKENS = st.lists(st.integers(0, 3), min_size=1, max_size=4)


@st.composite
def prompts(draw, longest: int) -> list[int]:
    """A prompt of 1 to ``longest`` tokens, most starting with a shared prefix."""
    prefix = draw(st.sampled_from(PREFIXES))[: draw(st.integers(0, 8))]
    suffix = draw(st.lists(st.integers(0, 3), max_size=3))
    return (list(prefix) + suffix)[:longest] or [0]


#: a sliding window of 1-12 tokens whose prefix cache keeps only the tails a later
#: request can resume at (vLLM's default) when the window is odd, every block when even
#: (taken from the window, so that drawing it adds no choice for the shrinker)
WINDOWS = st.integers(1, 12).map(lambda window: KVGroup(window, 0 if window % 2 else None))
#: the KV cache groups the machine draws for an allocator that takes them: one full
#: group 3 times in 4, else 1-3 groups, each full or a window
KV_GROUP_LAYOUTS = st.one_of(
    st.just(()),
    st.just(()),
    st.just(()),
    st.lists(WINDOWS | st.just(KVGroup()), min_size=1, max_size=3).map(tuple),
)
