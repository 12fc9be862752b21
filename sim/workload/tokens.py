"""Deterministic token ids: pure functions of (seed, key, position).

splitmix64 in numpy uint64 arithmetic seeds one state per stream (an output stream of a
request's sample, a request's own prompt tokens, a prefix group's system prompt, or a
Mooncake hash id); a lighter per-position mix then gives the tokens. The engine
synthesises decode tokens with :class:`SyntheticOutputs` and the workload builds session
turns with :func:`output_token_ids`, so both agree token for token. Prompts are built
from the same functions whenever asked (:mod:`sim.workload.prompts`), so none has to be
kept.
"""

from __future__ import annotations

import numpy as np

from sim.config.workload import STREAM_STRIDE
from sim.inputs.traces import MOONCAKE_BLOCK_TOKENS

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# Domains keep the output streams and the hash-id blocks independent of each other.
_OUTPUT_DOMAIN = 0x6F75747075740000
_HASH_BLOCK_DOMAIN = 0x68617368626C6B00
_PROMPT_DOMAIN = 0x70726F6D70740000
_GROUP_DOMAIN = 0x67726F7570000000
_MASK64 = (1 << 64) - 1


def _mix64_inplace(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (a bijection on uint64 with good avalanche), in place on a
    temporary the caller owns; in place because these arrays reach tens of millions."""
    z ^= z >> np.uint64(30)
    z *= _MIX1
    z ^= z >> np.uint64(27)
    z *= _MIX2
    z ^= z >> np.uint64(31)
    return z


_GOLDEN_INT, _MIX1_INT, _MIX2_INT = int(_GOLDEN), int(_MIX1), int(_MIX2)


def _mix64_int(z: int) -> int:
    """:func:`_mix64_inplace` on one Python integer in ``[0, 2**64)``."""
    z ^= z >> 30
    z = (z * _MIX1_INT) & _MASK64
    z ^= z >> 27
    z = (z * _MIX2_INT) & _MASK64
    return z ^ (z >> 31)


def _root(seed: int, domain: int) -> int:
    """The state every stream key of (seed, domain) is mixed with."""
    return _mix64_int((((seed ^ domain) & _MASK64) + _GOLDEN_INT) & _MASK64)


def _stream_states(seed: int, domain: int, keys: np.ndarray) -> np.ndarray:
    """One uint64 state per stream key, seeded by (seed, domain)."""
    with np.errstate(over="ignore"):
        # works on 0-d values too: augmented assignment rebinds numpy scalars
        root = _mix64_inplace(np.uint64((seed ^ domain) & _MASK64) + _GOLDEN)
        state = np.asarray(keys, dtype=np.int64).astype(np.uint64) + _GOLDEN
        state ^= root
        return _mix64_inplace(state)


def _tokens_at(states: np.ndarray, positions: np.ndarray, vocab_size: int) -> np.ndarray:
    """Element i: token ``positions[i]`` of the stream seeded by ``states[i]`` (inputs
    broadcast), in ``[0, vocab_size)``.

    Called by the engine every decode step, so it is a lighter mix than the stream
    seeding: the (already well mixed) state plus a Weyl step, one xorshift-multiply,
    then a multiply-high onto the vocabulary (cheaper than a uint64 modulo). Integer
    array overflow wraps silently in numpy, which is what the arithmetic relies on."""
    positions, states = np.asarray(positions), np.asarray(states)
    if positions.ndim == 0 and states.ndim == 0:  # numpy scalars warn on overflow
        return _tokens_at(states.reshape(1), positions.reshape(1), vocab_size)[0]
    z = positions.astype(np.uint64) * _GOLDEN
    z = z + states.view(np.uint64)  # int64 bit patterns (the engine's) too
    return _finish_tokens(z, vocab_size)


def _finish_tokens(z: np.ndarray, vocab_size: int) -> np.ndarray:
    """:func:`_tokens_at` from ``z`` = state + position * golden (a temporary it mixes
    in place)."""
    z ^= z >> np.uint64(29)
    z *= _MIX1
    z >>= np.uint64(32)
    z *= np.uint64(vocab_size)
    z >>= np.uint64(32)
    return z.astype(np.int32)


def stream_id(req_id: int | np.ndarray, sample_index: int | np.ndarray = 0):
    """The output stream of sample ``sample_index`` (0 <= i < STREAM_STRIDE) of request
    ``req_id``; works elementwise on int64 arrays."""
    return req_id * STREAM_STRIDE + sample_index


def output_token_ids(
    seed: int, stream_ids: np.ndarray, positions: np.ndarray, vocab_size: int
) -> np.ndarray:
    """The tokens a sequence generates: element i is the ``positions[i]``-th output token
    (0 = the first token sampled after the prompt) of stream ``stream_ids[i]`` (see
    :func:`stream_id`). Inputs broadcast; returns int32 ids in ``[0, vocab_size)``.
    Pure: the same arguments always give the same tokens."""
    return _tokens_at(_stream_states(seed, _OUTPUT_DOMAIN, stream_ids), positions, vocab_size)


def output_stream_states(seed: int, stream_ids: np.ndarray) -> np.ndarray:
    """The uint64 generator state of each output stream (computed once per stream; the
    tokens then come from :func:`stream_heads` or a token source's ``tokens``)."""
    return _stream_states(seed, _OUTPUT_DOMAIN, stream_ids)


class SyntheticOutputs:
    """The engine's source of decode tokens: what each request's sample generates.

    ``stream_state`` is computed once per sequence (kept by the engine as an int64 bit
    pattern); ``tokens`` is then the only per-step work."""

    def __init__(self, seed: int, vocab_size: int):
        self.seed = seed
        self.vocab_size = vocab_size
        self._root = _root(seed, _OUTPUT_DOMAIN)

    def stream_state(self, req_id: int, sample: int) -> int:
        """:func:`output_stream_states` of one stream, in Python integers: called once
        per sequence, where numpy's per-call overhead would cost ten times the maths."""
        key = (stream_id(req_id, sample) + _GOLDEN_INT) & _MASK64
        state = _mix64_int(key ^ self._root)
        return state - (1 << 64) if state >> 63 else state  # the int64 bit pattern

    def tokens(self, states: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return _tokens_at(states, positions, self.vocab_size)

    def decode_inputs(self, states: np.ndarray, generated: np.ndarray) -> np.ndarray:
        return _tokens_at(states, generated - 1, self.vocab_size)

    def prompt(self, request) -> np.ndarray:
        """``request.prompt``, built once for the engine to hold while in flight."""
        return request.prompt


class BlankOutputs:
    """A token source for runs in which nothing reads token ids (a cost model times the
    steps and the allocator does not hash them): every decode and prompt token is 0, no
    stream is seeded and no prompt is built. Times, memory and every output file are
    unchanged."""

    def __init__(self) -> None:
        self._zeros: dict[tuple[int, ...], np.ndarray] = {}  # by shape, read-only
        self._prompt_zeros = np.zeros(0, np.int32)  # prompts are read-only views of it

    def stream_state(self, req_id: int, sample: int) -> int:
        return 0

    def tokens(self, states: np.ndarray, positions: np.ndarray) -> np.ndarray:
        # One read-only array per shape (readers only read token ids): a decode step
        # allocates nothing here.
        return self._zeros_of(np.broadcast(states, positions).shape)

    def decode_inputs(self, states: np.ndarray, generated: np.ndarray) -> np.ndarray:
        return self._zeros_of(states.shape)  # (the decode step's hot path: no broadcast)

    def _zeros_of(self, shape: tuple[int, ...]) -> np.ndarray:
        zeros = self._zeros.get(shape)
        if zeros is None:
            zeros = self._zeros[shape] = np.zeros(shape, np.int32)
            zeros.flags.writeable = False
        return zeros

    def prompt(self, request) -> np.ndarray:
        length = request.prompt_len
        if self._prompt_zeros.shape[0] < length:
            self._prompt_zeros = np.zeros(max(length, 2 * self._prompt_zeros.shape[0]), np.int32)
            self._prompt_zeros.flags.writeable = False
        return self._prompt_zeros[:length]


def hash_block_tokens(
    seed: int, hash_ids: np.ndarray, vocab_size: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> np.ndarray:
    """The concatenated ``block_tokens``-token blocks behind a trace's ``hash_ids``
    (int32): equal ids, equal tokens."""
    states = _stream_states(seed, _HASH_BLOCK_DOMAIN, np.asarray(hash_ids, dtype=np.int64))
    positions = np.arange(block_tokens)
    return _tokens_at(states[:, None], positions[None, :], vocab_size).reshape(-1)


def stream_heads(states: np.ndarray, lengths: np.ndarray, vocab_size: int) -> np.ndarray:
    """Tokens ``0 .. lengths[i] - 1`` of the stream seeded by ``states[i]``, for every i,
    concatenated (int32)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    positions = np.arange(int(lengths.sum())) - np.repeat(starts, lengths)
    return _tokens_at(np.repeat(states, lengths), positions, vocab_size)


class PromptStreams:
    """Where synthetic prompt tokens come from: request ``req_id``'s own tokens are the
    head of its stream in the prompt domain, prefix group ``g``'s system prompt the head
    of stream ``g`` in the group domain (both seeded by ``seed``, independent of the
    output streams). Pure: the same arguments always give the same tokens."""

    def __init__(self, seed: int, vocab_size: int):
        self.seed = seed
        self.vocab_size = vocab_size
        self._own_root = _root(seed, _PROMPT_DOMAIN)
        self._steps = np.zeros(0, np.uint64)  # position * golden, positions 0, 1, ...

    def own(self, req_id: int, length: int) -> np.ndarray:
        """The first ``length`` own tokens of request ``req_id``. Seeded in Python
        integers and from the kept position steps: for one short stream numpy's
        per-call overhead would be most of the work."""
        state = _mix64_int(((req_id + _GOLDEN_INT) & _MASK64) ^ self._own_root)
        if self._steps.shape[0] < length:
            self._steps = np.arange(max(length, 2 * self._steps.shape[0]), dtype=np.uint64)
            self._steps *= _GOLDEN
        return _finish_tokens(self._steps[:length] + np.uint64(state), self.vocab_size)

    def own_many(self, req_ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """:meth:`own` of each request, concatenated."""
        states = _stream_states(self.seed, _PROMPT_DOMAIN, req_ids)
        return stream_heads(states, lengths, self.vocab_size)

    def group(self, group: int, length: int) -> np.ndarray:
        """Prefix group ``group``'s ``length``-token system prompt."""
        state = _stream_states(self.seed, _GROUP_DOMAIN, np.asarray([group]))
        return stream_heads(state, [length], self.vocab_size)
