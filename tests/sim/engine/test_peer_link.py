"""The peer link between prefill and decode instances: transfers share each instance's
ports fairly, wait the link's latency first, and end exactly when their bytes are in."""

from __future__ import annotations

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.peer_link import PeerLink


def run(ports, latency, transfers):
    """``transfers``: (start time, source, target, bytes); returns each one's end."""
    env = simpy.Environment()
    link = PeerLink(env, ports, latency)
    ends: dict[int, float] = {}

    def start_at(key, when, source, target, nbytes):
        yield env.timeout(when)
        link.start(key, source, target, nbytes, lambda t: ends.__setitem__(t.key, env.now))

    for key, (when, source, target, nbytes) in enumerate(transfers):
        env.process(start_at(key, when, source, target, nbytes))
    env.run()
    return ends, link


def test_two_reads_into_one_instance_share_its_port():
    # Alone 0.5 s of latency then 20 B/s... the second joins at 2.5 s and both get 5 B/s.
    ends, link = run([10.0, 10.0, 10.0], 0.5, [(0, 0, 1, 100), (2, 2, 1, 100)])
    assert ends == {0: 18.5, 1: 20.5}
    assert link.bytes_moved == 200 and link.busy_s == 20.0


def test_reads_between_different_instances_do_not_slow_each_other():
    ends, _ = run([10.0] * 4, 0.0, [(0, 0, 2, 100), (0, 1, 3, 100)])
    assert ends == {0: 10.0, 1: 10.0}


def test_the_slower_port_sets_the_rate():
    ends, link = run([40.0, 10.0], 1.0, [(0, 0, 1, 100)])
    assert ends == {0: 11.0} and link.alone_s(0, 1, 100) == 11.0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 5),
            st.integers(0, 2),
            st.integers(3, 4),
            st.floats(1, 1e3),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_every_byte_arrives_and_no_read_beats_an_idle_link(transfers):
    ends, link = run([7.0, 9.0, 11.0, 5.0, 13.0], 0.25, transfers)
    assert sorted(ends) == list(range(len(transfers)))
    total = sum(t[3] for t in transfers)
    assert abs(link.bytes_moved - total) <= 1e-9 * total
    for key, (when, source, target, nbytes) in enumerate(transfers):
        assert ends[key] >= when + link.alone_s(source, target, nbytes) * (1 - 1e-9)
