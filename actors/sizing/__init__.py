"""Demand sizing of pools: schedule windows, the online demand forecast and the sizing policy."""
