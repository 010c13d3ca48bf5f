"""inferplan: capacity planner for LLM inference on a fast, trace-driven serving simulator."""

from inferplan import native

__version__ = "0.1.0"

# Compiled (mypyc) engine modules load only while they match their sources and
# INFERPLAN_PURE is unset; decided before any of them is imported (``native.py``).
native.install()
