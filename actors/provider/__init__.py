"""Provider actors: one per configured provider, owning its worker threads."""
