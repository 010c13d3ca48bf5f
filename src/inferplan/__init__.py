"""inferplan: a capacity planner for LLM inference built on a fast, trace-driven serving simulator."""

__version__ = "0.1.0"
