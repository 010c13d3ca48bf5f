"""Plan: validation against published measurements (and, later, search and cost)."""
