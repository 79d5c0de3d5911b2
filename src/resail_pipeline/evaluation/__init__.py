"""Evaluation: success rates per seed, dual-view evaluation, the sensitivity probe, the report."""
