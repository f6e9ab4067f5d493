"""Several managers on one Redis: who is live, who holds which lease, and messages between them."""
