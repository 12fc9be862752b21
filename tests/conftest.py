"""Hypothesis profiles: a quick `ci` one (default) and a long `nightly` one.

Select with HYPOTHESIS_PROFILE=nightly; the nightly profile runs at least 10x the
examples of ci.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=False,
    print_blob=True,
)
settings.register_profile(
    "nightly",
    max_examples=1000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=20, stateful_step_count=20, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


import pytest  # noqa: E402

from tests.browser import find_chromium, install_chromium  # noqa: E402


@pytest.fixture(scope="session")
def chromium() -> str:
    """A headless-capable Chromium: the one on PATH, else one ``apt-get install -y
    chromium`` brings; the test is skipped, with the reason, when neither works."""
    path = find_chromium()
    if path is None:
        path, why = install_chromium()
        if path is None:
            pytest.skip(why)
    return path
