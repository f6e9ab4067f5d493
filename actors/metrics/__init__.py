"""Metric backends (DogStatsD, statsd, graphite, Prometheus) and the metric catalogue."""
