"""Memory: the per-device budget and the KV capacity it leaves (DESIGN §1, memory axis)."""
