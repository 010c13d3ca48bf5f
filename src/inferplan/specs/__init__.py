"""Specs: what a model and a device are, as data (DESIGN §3, capability 1)."""
