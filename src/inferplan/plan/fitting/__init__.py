"""Fitting the GPU families' fractions and the engine releases' host costs to the published
table, and cross-validating them by configuration (``scripts/fit_published.py`` is the CLI).

- ``config``: what is fitted (``FitConfig``: bounds, per-release fixed and fitted costs, the
  release classes) and the constants themselves (``Constants``), with the rows and predictions.
- ``served_fit``: the served runs' rows, linearised around a point (``--served``).
- ``descent``: the loss and the block coordinate descent, and the starting points.
- ``crossval``: grouped k-fold cross-validation by configuration.
- ``report``: the printed tables and the files written.
"""
