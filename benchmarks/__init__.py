"""Benchmarks of dynsource against Spark's own reader and DPP (see docs/performance.md)."""
