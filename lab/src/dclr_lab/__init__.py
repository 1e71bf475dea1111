"""Reproduction harness: experiment specs, a runner, a SQLite run registry, reports and HP search."""
