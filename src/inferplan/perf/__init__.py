"""Performance: how long one engine step takes on a device group (DESIGN §1, compute axis)."""
