"""inferplan: capacity planner for LLM inference on a fast, trace-driven serving simulator."""

__version__ = "0.1.0"
