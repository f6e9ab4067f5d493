"""API resources, one module per group; each has ``register(app, ctx, prefix)``."""
