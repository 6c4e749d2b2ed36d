"""Benchmarks, run by hand; outside the tests. See bench/README.md."""
