"""The chart in conf/helm/vmpooler, loaded once per test module."""

from __future__ import annotations

import helm_python
import pytest

from tests.helm.chart import CHART


@pytest.fixture(scope="module")
def chart() -> helm_python.Chart:
    with helm_python.Chart.load(str(CHART)) as loaded:
        yield loaded
