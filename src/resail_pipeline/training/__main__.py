"""Train one cycle of a policy: OEL or offline SDPO, with or without the ReSAIL plug-in.

One process (CPU, or one device)::

    python -m resail_pipeline.training --config data/07_model_output/cycle_1/train/train_config.yaml

Data parallel, one process per device (DeepSpeed with GPUs; DDP over gloo on CPU)::

    torchrun --standalone --nproc_per_node=8 -m resail_pipeline.training \\
        --config data/07_model_output/cycle_1/train/train_config.yaml

The configuration is a :class:`~resail_pipeline.training.config.TrainConfig` in YAML (the
``train`` pipeline writes it, resolved, with the input manifest it names). On success the final
student is published at ``run.checkpoint``; on any error the process exits non-zero and nothing
is published there.
"""

from __future__ import annotations

import sys

from torch.distributed.elastic.multiprocessing.errors import record

from resail_pipeline.training.config import TrainConfig
from resail_pipeline.training.engine import run_rank
from resail_pipeline.training.run import TrainingRun


@record  # an error ends in TORCHELASTIC_ERROR_FILE; torchrun reports the first failing rank's
def main(argv: list[str] | None = None) -> int:
    return run_rank(
        argv,
        prog="python -m resail_pipeline.training",
        description=__doc__.split("\n\n")[0],
        config_help="the run's TrainConfig YAML file",
        start=lambda path: TrainingRun(TrainConfig.from_yaml(path)).run(),
    )


if __name__ == "__main__":
    sys.exit(main())
