"""Placement: which pool serves a requested name, for a checkout, an on-demand request and the
replay, and which pools of a failover alias can deliver now.

* :mod:`.weights`: ``backend_weight`` and vmpooler's weighted draw of a backend;
* :mod:`.choose`: the candidates of a checkout, the pool of each on-demand instance (pure:
  configuration, random source and health reader are the caller's);
* :mod:`.health`: the one reader of alias failover's published states
  (:class:`~.health.Published`) and the API's cached view of them with the providers'
  breakers (:class:`~.health.BackendHealth`).

No HTTP here: the API, the on-demand plan, the replay and the pool actors use it alike.
"""
