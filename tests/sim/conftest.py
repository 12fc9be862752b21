"""Fixtures shared by the simulator's tests."""

from __future__ import annotations

import pytest

from tests.browser import find_chromium, install_chromium


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
