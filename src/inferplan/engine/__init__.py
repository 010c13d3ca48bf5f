"""Engine: the event loop and replicas (scheduler + KV pool + step-time model)."""

# The scheduler table first: engine/sglang.py subclasses schedulers.Scheduler and is registered
# at the end of schedulers.py, which must therefore be imported before it.
from inferplan.engine import schedulers as _schedulers  # noqa: F401
