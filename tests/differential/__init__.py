"""Differential tests against the real Ruby vmpooler 3.9.1: the same requests to its API and to
ours, each over its own identically seeded redis-server, and their answers and Redis writes
compared (``tests/test_differential.py``); mixed deployments of its API with our processes
(``tests/test_mixed_deployment.py``)."""
