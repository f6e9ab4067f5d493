"""The replay simulator behind ``vmpooler replay``: the real pool actors on a fake clock, fed a
trace of checkouts (docs/replay.md).

* :mod:`.configuration`: the operator's configuration as the replay runs it;
* :mod:`.provider`: the simulated hypervisor (clones, suspends, resumes in simulated time);
* :mod:`.run`: one run of a trace under one policy;
* :mod:`.progress`: how far a run is, told while it runs (stderr's bar or lines);
* :mod:`.report`: what a run measures, and its table or JSON;
* :mod:`.series`: the time series a run records per pool, for the page;
* :mod:`.charts` and :mod:`.page`: the page of ``--report`` (inline SVG, one HTML file).
"""
