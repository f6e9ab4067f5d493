"""Bundled configuration files."""
