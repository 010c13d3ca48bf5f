"""Cluster-level components: pools, routing between them, disaggregation, failures."""
