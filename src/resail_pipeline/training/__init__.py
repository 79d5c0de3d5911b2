"""The trainer: one cycle of OEL or offline SDPO, with or without the ReSAIL plug-in.

- :mod:`.config`: :class:`TrainConfig` (YAML, validated before anything is loaded);
- :mod:`.data`: the input manifest, the steps and summaries, the batch schedule;
- :mod:`.views`: both views of a step packed over their shared prefix, logits at response positions;
- :mod:`.scoring`: the frozen teacher's targets and PI sensitivity (:func:`score_steps`), and
  offline SDPO's cached responses (:func:`sample_responses`);
- :mod:`.engine`: one process, DDP or DeepSpeed ZeRO;
- :mod:`.trainer`: the update of algorithm 1; :mod:`.run`: one cycle in one process;
- :mod:`.probe`: the PI-sensitivity probe (appendix D.3): the fixed probe set
  (:func:`build_probe_set`) and the trainer's hook that measures the current student on it;
- :mod:`.launcher`: :func:`launch` runs ``python -m resail_pipeline.training`` (under torchrun
  where it takes more than one process) and collects its outputs.
"""

from resail_pipeline.config import ConfigError
from resail_pipeline.training.config import METHODS, TrainConfig
from resail_pipeline.training.data import (
    InputError,
    InputManifest,
    read_manifest,
    usable_steps,
    write_inputs,
)
from resail_pipeline.training.launcher import TrainingFailed, TrainResult, launch
from resail_pipeline.training.probe import ProbeSet, build_probe_set, empty_probe_set
from resail_pipeline.training.scoring import sample_responses, score_steps, teacher_targets

__all__ = [
    "METHODS",
    "ConfigError",
    "InputError",
    "InputManifest",
    "ProbeSet",
    "TrainConfig",
    "TrainResult",
    "TrainingFailed",
    "build_probe_set",
    "empty_probe_set",
    "launch",
    "read_manifest",
    "sample_responses",
    "score_steps",
    "teacher_targets",
    "usable_steps",
    "write_inputs",
]
