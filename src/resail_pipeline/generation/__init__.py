"""Generation backends behind one protocol."""

from resail_pipeline.generation.base import Generation, Generator, SamplingParams

__all__ = ["Generation", "Generator", "SamplingParams"]
