"""On-demand requests: the request actors and the manager that starts them."""
