"""What a request may put into the API's metrics: the API's side of
:class:`vmpooler.actors.metrics.bounded.LabelRule`.

:func:`bound` gives a context's metrics the rule (once per context; ``create_app`` calls it
before anything else reads ``ctx.metrics``): every tag of every metric the API sends passes
through it, on every backend. The values kept as sent:

* pools: the configured pools and aliases (anything else is ``unknown``);
* the route parameters left in a Prometheus path label after vmpooler's collapse: ``pool``
  (a configured pool), ``route`` (``boot``, ``clone``, ``tag``), ``key`` (``duration``,
  ``count`` and the tag names of ``:tagfilter:``) and ``name`` (the dashboard's assets).
"""

from __future__ import annotations

from vmpooler.actors.config import Config
from vmpooler.actors.metrics.backends import Metrics
from vmpooler.actors.metrics.bounded import BoundedMetrics, LabelRule
from vmpooler.web.api_context import ApiContext
from vmpooler.web.resources.dashboard import ASSETS
from vmpooler.web.resources.summary import SUMMARY_KEYS, SUMMARY_ROUTES

__all__ = ["bound", "label_rule", "unbounded"]


def label_rule(config: Config) -> LabelRule:
    """The rule for an API serving ``config``."""
    pools = tuple(config.pool_names)
    return LabelRule((*pools, *config.aliases), params={
        "pool": pools,
        "route": SUMMARY_ROUTES,
        "key": (*SUMMARY_KEYS, *config.tagfilter),
        "name": tuple(ASSETS),
    })


def bound(ctx: ApiContext) -> LabelRule:
    """Wrap ``ctx.metrics`` in :class:`BoundedMetrics` unless it already is; its rule."""
    if not isinstance(ctx.metrics, BoundedMetrics):
        ctx.metrics = BoundedMetrics(ctx.metrics, label_rule(ctx.config))
    return ctx.metrics.rule


def unbounded(metrics: Metrics) -> Metrics:
    """The backend under a :class:`BoundedMetrics` (``metrics`` itself otherwise)."""
    return metrics.inner if isinstance(metrics, BoundedMetrics) else metrics
