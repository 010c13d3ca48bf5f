"""Engine: the event loop and replicas (scheduler + KV pool + step-time model)."""
