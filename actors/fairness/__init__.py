"""Fairness between users: who is asking, their quotas, shares and priorities (docs/fairness.md)."""
