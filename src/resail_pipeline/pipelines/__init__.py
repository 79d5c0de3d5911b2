"""Kedro pipelines: one folder per pipeline, thin nodes over the library."""
