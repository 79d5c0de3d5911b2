"""Training engines: one process, torch DDP, or DeepSpeed ZeRO, behind one small interface.

Every engine optimises a :class:`~resail_pipeline.training.views.ResponseLogits` around the
student with AdamW (a client torch optimiser under DeepSpeed too) and offers the same steps:

- ``with engine.micro_batch(last=...)``: around the forward and backward of one micro-batch;
  gradients are accumulated locally and reduced across ranks once, with the last micro-batch
  (DDP) or at ``step`` (DeepSpeed ZeRO-1/2, "unmanaged" accumulation);
- ``engine.backward(loss)``: the caller's loss is already the exact share of this rank, scaled
  by the world size, so that the engines' gradient *average* over ranks is the global sum;
- ``engine.step()``: clip, AdamW step, zero the gradients; returns the pre-clip gradient norm;
- ``engine.training_state()`` / ``engine.load_training_state(...)``: the student's weights and
  AdamW's state as flat tensors, for a killed run's rerun to continue from (one process and DDP);
  under DeepSpeed, whose optimiser state is partitioned over the ranks, ``engine.save_state`` /
  ``engine.load_state`` write and read DeepSpeed's own checkpoint of every rank's partition
  (``engine.collective_state``). Either way ``engine.resumable``.

Every rank must run the same number of micro-batches per update (collectives are matched).

Precision: ``fp32`` everywhere, or ``bf16``: bf16 parameters with fp32 optimiser state and fp32
gradient accumulation under DeepSpeed (as in the paper), bf16 autocast over fp32 parameters with
the other engines (CPU or GPU).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from transformers import PreTrainedModel

from resail_pipeline.checkpoints import load_optimizer_tensors, optimizer_tensors
from resail_pipeline.training.config import EngineConfig, OptimizerConfig
from resail_pipeline.training.views import ResponseLogits

#: the names of AdamW's tensors in a training state, beside the model's (``optimizer.0.exp_avg``)
_OPTIMIZER_PREFIX = "optimizer."

__all__ = [
    "DeepSpeedEngine",
    "Engine",
    "TorchEngine",
    "adamw",
    "autocast",
    "barrier",
    "build_engine",
    "deepspeed_config",
    "init_distributed",
    "run_rank",
]

logger = logging.getLogger(__name__)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` for ``precision == "bf16"``, else nothing."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def init_distributed(kind: str) -> tuple[int, int, torch.device]:
    """Join the process group torchrun describes (if any); return ``(rank, world_size, device)``.

    One process without torchrun's variables runs alone (no process group). NCCL is used with
    GPUs, gloo without.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if "WORLD_SIZE" in os.environ and not dist.is_initialized():
        backend = "nccl" if cuda else "gloo"
        if kind == "deepspeed":
            import deepspeed

            deepspeed.init_distributed(dist_backend=backend)
        else:
            dist.init_process_group(backend=backend)
    group = f"{dist.get_backend()} process group" if dist.is_initialized() else "no process group"
    logger.info("rank %d of %d on %s, %s", rank, world_size, device, group)
    return rank, world_size, device


def run_rank(
    argv: list[str] | None,
    *,
    prog: str,
    description: str,
    config_help: str,
    start: Callable[[str], object],
) -> int:
    """A trainer process's command line (one rank, alone or under torchrun): ``--config PATH``,
    the rank's logging (INFO on rank 0, warnings elsewhere, each line tagged with the rank),
    ``start(PATH)``, then the process group left, whatever happened. The module's ``main`` wraps
    it in torchrun's ``record``, so that an error ends in ``TORCHELASTIC_ERROR_FILE``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", required=True, help=config_help)
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format=f"%(asctime)s [rank {rank}] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        start(args.config)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def barrier(device: torch.device) -> None:
    """Wait for every rank of the process group; under NCCL on the rank's own GPU (named, since
    torch otherwise guesses the device in the current context and warns)."""
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def adamw(parameters: list[nn.Parameter], config: OptimizerConfig) -> torch.optim.AdamW:
    """The optimiser every trainer uses: AdamW as ``config`` sets it (constant learning rate)."""
    return torch.optim.AdamW(
        parameters,
        lr=config.lr,
        betas=config.betas,
        eps=config.eps,
        weight_decay=config.weight_decay,
    )


class Engine(ABC):
    """What the training loop needs from an engine (see the module docstring).

    Attributes:
        inner: the unwrapped student (:class:`ResponseLogits`; its HF model is ``inner.model``);
            use it for forwards without gradient and for generation.
        module: what gradient forwards go through (the engine's wrapper of ``inner``).
        rank: this process's rank.
        world_size: number of processes.
        device: this process's device.
        precision: ``fp32`` or ``bf16``.
    """

    inner: ResponseLogits
    module: nn.Module
    rank: int
    world_size: int
    device: torch.device
    precision: str

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision context for forwards of the student and the teacher."""
        return autocast(self.device, "fp32" if self.casts_parameters else self.precision)

    @property
    def casts_parameters(self) -> bool:
        """Whether the student's parameters themselves are bf16 (no autocast needed)."""
        return False

    @contextlib.contextmanager
    def micro_batch(self, *, last: bool) -> Iterator[None]:
        """Around one micro-batch's forward and backward; ``last`` is the update's final one."""
        yield

    @abstractmethod
    def backward(self, loss: Tensor) -> None:
        """Accumulate the gradient of this rank's share of the loss."""

    @abstractmethod
    def step(self) -> float:
        """Reduce, clip, step AdamW, zero gradients; return the global gradient norm before clipping."""

    def consolidated_state_dict(self) -> dict[str, Tensor] | None:
        """Weights to publish instead of ``inner.model``'s own, where those are partitioned.

        ``None`` when ``inner.model`` holds the complete weights (every engine but ZeRO-3).
        A collective: every rank must call it.
        """
        return None

    #: whether a killed run's rerun can continue from this engine's state
    resumable: bool = False
    #: whether that state is every rank's own (:meth:`save_state`, :meth:`load_state`, called by
    #: every rank) rather than one flat copy (:meth:`training_state`, rank 0's)
    collective_state: bool = False

    def save_state(self, folder: Path) -> None:
        """Write this rank's share of the state into ``folder`` (every rank calls it)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no per-rank state")

    def load_state(self, folder: Path) -> None:
        """Read what :meth:`save_state` wrote into ``folder`` (every rank calls it)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no per-rank state")

    def barrier(self) -> None:
        """Wait for every rank (nothing in one process)."""
        if self.world_size > 1:
            barrier(self.device)

    def training_state(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """What a rerun needs to continue from here: the student's weights (``model.*``) and
        AdamW's per-parameter state (``optimizer.<index>.<name>``) as flat CPU tensors, and its
        parameter groups (JSON-serialisable); the same on every rank."""
        raise NotImplementedError(f"{type(self).__name__} gives no training state")

    def load_training_state(self, tensors: dict[str, Tensor], groups: dict[str, Any]) -> None:
        """Set the student and AdamW to what :meth:`training_state` gave (every rank)."""
        raise NotImplementedError(f"{type(self).__name__} takes no training state")

    def sampling_model(self) -> PreTrainedModel:
        """The student as generation reads it: ``inner.model`` itself, where its weights are
        whole on every rank (every engine but ZeRO-3)."""
        return self.inner.model

    def sync_sampling_model(self) -> None:
        """Bring :meth:`sampling_model` to the current weights. Every rank calls it before
        sampling, whatever its share of the steps: under ZeRO-3 it is a collective."""
        return  # whole weights on every rank: the sampling model is the student

    def sum_over_ranks(self, local: Tensor) -> Tensor:
        """The sum over ranks of a CPU tensor (a collective; ``local`` itself with one process).

        With entries that each rank owns exclusively (zeros elsewhere), this is a gather.
        """
        if self.world_size == 1:
            return local
        tensor = local.to(self.device)
        dist.all_reduce(tensor)
        return tensor.cpu()

    def idle_forward(self, pad_id: int, *, with_grad: bool) -> Tensor:
        """0 from a one-token forward, for a rank with nothing to do where the others forward.

        Collectives are matched across ranks: DDP's forward with gradient communicates, and
        ZeRO-3 gathers parameters in every forward. With gradient the token goes through
        ``module`` and the 0 is attached to its graph (for the matching backward); without,
        through ``inner``, as the no-grad forwards do.
        """
        ids = torch.full((1, 1), pad_id, dtype=torch.long, device=self.device)
        zeros = torch.zeros_like(ids)
        module = self.module if with_grad else self.inner
        with torch.set_grad_enabled(with_grad), self.autocast():
            logits = module(ids, torch.ones_like(ids), zeros, zeros)  # (1, 1, V)
        return logits.float().sum() * 0.0


def _hf_keys(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """``ResponseLogits`` state-dict keys (``model.*``) as the wrapped HF model's."""
    return {k.removeprefix("model."): v for k, v in state.items()}


class TorchEngine(Engine):
    """One process, or torch ``DistributedDataParallel`` over the process group."""

    resumable = True

    def __init__(
        self,
        student: ResponseLogits,
        optimizer: OptimizerConfig,
        *,
        rank: int,
        world_size: int,
        device: torch.device,
        precision: str,
    ) -> None:
        self.inner = student.to(device)
        self.rank, self.world_size, self.device, self.precision = (
            rank,
            world_size,
            device,
            precision,
        )
        self._parameters = [p for p in student.parameters() if p.requires_grad]
        self._optimizer = adamw(self._parameters, optimizer)
        self._clip = optimizer.grad_clip
        self._ddp = world_size > 1
        if self._ddp:
            self.module = nn.parallel.DistributedDataParallel(
                student,
                device_ids=[device.index] if device.type == "cuda" else None,
                # the buffers (rotary frequencies) are equal on every rank: no sync per forward
                forward_sync_buffers=False,
            )
        else:
            self.module = student

    @contextlib.contextmanager
    def micro_batch(self, *, last: bool) -> Iterator[None]:
        # DDP reduces in the backward of the last micro-batch; the others accumulate locally
        if self._ddp and not last:
            with self.module.no_sync():
                yield
        else:
            yield

    def backward(self, loss: Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        max_norm = self._clip if self._clip is not None else math.inf
        norm = torch.nn.utils.clip_grad_norm_(self._parameters, max_norm)
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def training_state(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        # copies: tied weights share storage, which safetensors refuses to write twice
        tensors = {k: v.detach().to("cpu", copy=True) for k, v in self.inner.state_dict().items()}
        moments, param_groups = optimizer_tensors(self._optimizer, prefix=_OPTIMIZER_PREFIX)
        return {**tensors, **moments}, {"param_groups": param_groups}

    def load_training_state(self, tensors: dict[str, Tensor], groups: dict[str, Any]) -> None:
        weights = {k: v for k, v in tensors.items() if not k.startswith(_OPTIMIZER_PREFIX)}
        self.inner.load_state_dict(weights, strict=True)
        # AdamW moves its state to each parameter's device and dtype (its step counts stay fp32)
        load_optimizer_tensors(
            self._optimizer, tensors, groups["param_groups"], prefix=_OPTIMIZER_PREFIX
        )


def deepspeed_config(engine: EngineConfig, optimizer: OptimizerConfig) -> dict[str, Any]:
    """The DeepSpeed configuration of a run (a client AdamW is passed separately).

    Micro-batches are interaction steps chosen by the trainer, not DeepSpeed samples: DeepSpeed
    sees one "sample" per step call and leaves accumulation to the caller
    (``managed_gradient_accumulation: false``).
    """
    bf16 = engine.precision == "bf16"
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": optimizer.grad_clip or 0.0,
        "bf16": {"enabled": bf16},
        # main gradients accumulate in fp32; the optimiser keeps fp32 master weights and state
        "data_types": {"grad_accum_dtype": "fp32"} if bf16 else {},
        "zero_optimization": {
            "stage": engine.zero_stage,
            "contiguous_gradients": True,
            "overlap_comm": False,
        },
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


class DeepSpeedEngine(Engine):
    """DeepSpeed ZeRO (stage 1, 2 or 3) with a client torch AdamW."""

    def __init__(
        self,
        student: ResponseLogits,
        engine: EngineConfig,
        optimizer: OptimizerConfig,
        *,
        rank: int,
        world_size: int,
        device: torch.device,
    ) -> None:
        import deepspeed

        self.rank, self.world_size, self.device = rank, world_size, device
        self.precision = engine.precision
        self._stage = engine.zero_stage
        student = student.to(device)
        parameters = [p for p in student.parameters() if p.requires_grad]
        self.module, _, _, _ = deepspeed.initialize(
            model=student,
            optimizer=adamw(parameters, optimizer),
            config=deepspeed_config(engine, optimizer),
        )
        self.inner = self.module.module
        self._sampler: PreTrainedModel | None = None

    @property
    def casts_parameters(self) -> bool:
        return self.precision == "bf16"

    def backward(self, loss: Tensor) -> None:
        self.module.backward(loss, scale_wrt_gas=False)

    def step(self) -> float:
        self.module.step()
        norm = self.module.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def sampling_model(self) -> PreTrainedModel:
        """Under ZeRO-3, a plain copy of the student on this rank's device (built once, refreshed
        by :meth:`sync_sampling_model`): every forward of the partitioned student gathers its
        parameters collectively, so ranks that decode different numbers of tokens would wait on
        each other for ever; the copy decodes alone. Other stages hold whole weights already."""
        if self._stage != 3:
            return self.inner.model
        if self._sampler is None:
            student = self.inner.model
            with torch.device("meta"):
                sampler = type(student)(student.config)
            sampler = sampler.to_empty(device=self.device).requires_grad_(False).eval()
            sampler.tie_weights()  # to_empty gives tied parameters one tensor each
            with torch.no_grad():
                for name, buffer in student.named_buffers():  # not partitioned by ZeRO
                    sampler.get_buffer(name).copy_(buffer)
            self._sampler = sampler
        return self._sampler

    def sync_sampling_model(self) -> None:
        if self._stage != 3:
            return
        import deepspeed

        target = dict(self.sampling_model().named_parameters())
        with torch.no_grad():
            for name, parameter in self.inner.model.named_parameters():
                with deepspeed.zero.GatheredParameters([parameter], modifier_rank=None):
                    target[name].copy_(parameter.data)

    #: DeepSpeed's own checkpoint of every rank's partition of the weights and the optimiser
    resumable = True
    collective_state = True
    #: the tag DeepSpeed files the state under
    STATE_TAG = "engine"

    def save_state(self, folder: Path) -> None:
        self.module.save_checkpoint(str(folder), tag=self.STATE_TAG, save_latest=False)

    def load_state(self, folder: Path) -> None:
        path, _ = self.module.load_checkpoint(
            str(folder),
            tag=self.STATE_TAG,
            load_optimizer_states=True,
            load_lr_scheduler_states=False,
            load_module_only=False,
        )
        if path is None:
            raise RuntimeError(f"{folder}: DeepSpeed found no state to load")

    def consolidated_state_dict(self) -> dict[str, Tensor] | None:
        if self._stage != 3:
            return None
        # ZeRO-3 partitions the parameters: gather them (a collective), complete on rank 0 only
        state = self.module._zero3_consolidated_16bit_state_dict()
        return _hf_keys(state) if self.rank == 0 else None


def build_engine(
    student: ResponseLogits,
    engine: EngineConfig,
    optimizer: OptimizerConfig,
    *,
    rank: int,
    world_size: int,
    device: torch.device,
) -> Engine:
    """The engine ``engine.kind`` names (``auto`` must be resolved first)."""
    if engine.kind == "deepspeed":
        return DeepSpeedEngine(
            student, engine, optimizer, rank=rank, world_size=world_size, device=device
        )
    if engine.kind in ("single", "ddp"):
        if engine.kind == "ddp" and world_size > 1 and not dist.is_initialized():
            raise RuntimeError("engine.kind: ddp needs a process group (run under torchrun)")
        return TorchEngine(
            student,
            optimizer,
            rank=rank,
            world_size=world_size,
            device=device,
            precision=engine.precision,
        )
    raise ValueError(f"engine.kind: resolve 'auto' before building an engine, got {engine.kind!r}")
