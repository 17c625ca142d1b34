from __future__ import annotations

import pytest

from helpers import EXAMPLE


@pytest.fixture
def example_text() -> str:
    return EXAMPLE.read_text(encoding="utf-8")
