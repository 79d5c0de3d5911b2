"""ReSAIL: retentive and selective augmentation for iterative self-distillation of LLM agents."""

__version__ = "0.1.0"
