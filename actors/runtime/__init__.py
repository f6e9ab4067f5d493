"""The actor runtime: supervision, clocks, worker pools, circuit breakers."""
