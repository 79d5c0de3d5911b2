"""Load and publish policies as Hugging Face directories (safetensors + config + tokenizer).

A checkpoint is written to a temporary directory and renamed into place only when complete;
loading never runs remote code and reads safetensors only.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from resail_pipeline.devices import matmul_rates
from resail_pipeline.io import atomic_path, sha256_files
from resail_pipeline.schemas import check_columns

logger = logging.getLogger(__name__)

MANIFEST_NAME = "resail_manifest.json"


class CheckpointError(FileNotFoundError):
    """A checkpoint directory is missing or incomplete."""


def check_checkpoint(path: str | Path) -> Path:
    """Return ``path`` if it is a loadable checkpoint directory; else raise naming what is missing."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path}: no such directory")
    if not (path / "config.json").is_file():
        raise CheckpointError(f"checkpoint {path}: config.json is missing")
    if not list(path.glob("*.safetensors")):
        raise CheckpointError(
            f"checkpoint {path}: no *.safetensors weights (pickled weights are not loaded)"
        )
    return path


def verify_weights(path: str | Path) -> Path:
    """Return ``path`` once its weights are readable and fit its config; else a
    :class:`CheckpointError` naming the directory and the file or tensor.

    Reads each safetensors file's header (a truncated or random file fails here) and compares
    every tensor's shape with the model its ``config.json`` describes, built on the meta device
    (nothing is allocated, so it costs the same for a 4B model as for the embedded one). The
    output layer may be absent where it is tied to the embedding; any other missing or unexpected
    tensor is an error.
    """
    from safetensors import SafetensorError, safe_open
    from transformers import AutoConfig

    path = check_checkpoint(path)
    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    shapes[name] = tuple(handle.get_slice(name).get_shape())
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(
                f"checkpoint {path}: {file.name} is unreadable ({error})"
            ) from None
    config = AutoConfig.from_pretrained(str(path), trust_remote_code=False)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    missing = set(expected) - set(shapes)
    if getattr(config, "tie_word_embeddings", False):  # the output layer is the embedding
        missing = {name for name in missing if not name.endswith("lm_head.weight")}
    if missing:
        raise CheckpointError(f"checkpoint {path}: tensor(s) {sorted(missing)[:3]} missing")
    for name, shape in shapes.items():
        if name not in expected:
            raise CheckpointError(
                f"checkpoint {path}: tensor {name!r} is not in its config's model"
            )
        if shape != expected[name]:
            raise CheckpointError(
                f"checkpoint {path}: tensor {name!r} has shape {list(shape)}, its config's model "
                f"{list(expected[name])}"
            )
    return path


def weights_sha256(path: str | Path) -> str:
    """sha256 over the checkpoint's safetensors files (names and contents, sorted by name)."""
    return sha256_files(sorted(Path(path).glob("*.safetensors")))


def _decides_outputs(file: Path) -> bool:
    """A configuration, tokenizer or template file of a checkpoint (not its weights, manifest or
    the records a trainer leaves beside them, such as ``train.log``)."""
    name = file.name
    if name == MANIFEST_NAME:
        return False
    return name.endswith(".json") or name.startswith(
        ("tokenizer", "chat_template", "vocab", "merges")
    )


def files_sha256(path: str | Path) -> str:
    """sha256 over everything else of the checkpoint that decides its outputs, the weights apart
    (:func:`weights_sha256`): the model and generation configs, the tokenizer files and the chat
    template (names and contents)."""
    path = Path(path)
    return sha256_files(sorted(f for f in path.iterdir() if f.is_file() and _decides_outputs(f)))


def read_manifest(path: str | Path) -> dict[str, Any] | None:
    """The checkpoint's :data:`MANIFEST_NAME` as a dict; ``None`` where it has none. An unreadable
    manifest (not JSON, not an object) is a :class:`CheckpointError` naming it."""
    manifest = Path(path) / MANIFEST_NAME
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(
            f"checkpoint {path}: {MANIFEST_NAME} is unreadable ({error})"
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(f"checkpoint {path}: {MANIFEST_NAME} is not a JSON object")
    return data


def verify_files(path: str | Path, *, foreign: bool = False) -> Path:
    """Return ``path`` if its config, tokenizer and template files are the ones its manifest
    recorded (``files_sha256``), else raise :class:`CheckpointError`: an edited ``rope_theta`` or
    chat template changes every output under the same weights and policy id.

    A manifest without ``files_sha256``, or no manifest at all, is refused too (deleting either
    would switch the check off); only a ``foreign`` checkpoint, one given by path that this
    project did not write (``bootstrap.checkpoint``: any local Hugging Face directory), may have
    no manifest. The message says what is wrong; the caller adds what to do.
    """
    path = Path(path)
    manifest = read_manifest(path)
    if manifest is None:
        if foreign:
            return path
        raise CheckpointError(
            f"checkpoint {path}: {MANIFEST_NAME} is missing, so its config, tokenizer and chat "
            "template cannot be checked"
        )
    expected = manifest.get("files_sha256")
    if expected is None:
        raise CheckpointError(
            f"checkpoint {path}: its {MANIFEST_NAME} has no files_sha256, so its config, "
            "tokenizer and chat template cannot be checked"
        )
    if files_sha256(path) != expected:
        raise CheckpointError(
            f"checkpoint {path}: its config, tokenizer or chat template files changed since "
            "it was published (files_sha256 differs from its manifest)"
        )
    return path


def load_tokenizer(path: str | Path) -> Any:
    tokenizer = AutoTokenizer.from_pretrained(str(check_checkpoint(path)), trust_remote_code=False)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def resolve_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch device; ``auto`` is the first CUDA device when torch sees one, else the
    CPU (where the trainer's rank 0 runs)."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    return torch.device(device)


def bf16_native(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 matrix products natively: a CUDA device with bf16 support,
    or a CPU whose oneDNN has bf16 kernels (AVX-512 or AMX). Elsewhere bf16 autocast is emulated,
    and far slower than fp32 (``benchmarks/bootstrap_training.py`` measures both).
    """
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):  # a torch build without oneDNN
            return False
    return False


def bf16_faster(device: torch.device) -> bool:
    """Whether ``device`` multiplies matrices faster in bf16 than in fp32: a CUDA device with bf16
    support; a CPU that computes bf16 natively (:func:`bf16_native`) where its bf16 products, timed
    beside fp32's, run faster. Native is not enough on a CPU: with AMX tiles bf16 is the faster,
    but with AVX-512 BF16 alone it depends on the processor, and where fp32's products are the
    faster, fp32 evaluates faster too (docs/generation.md, "Choosing the dtype")."""
    if device.type != "cpu":
        return bf16_native(device)
    return bf16_native(device) and _cpu_bf16_faster()


@functools.cache
def _cpu_bf16_faster() -> bool:
    """Whether this process's CPU products run faster in bf16 than in fp32, each dtype's best of
    three timings (:func:`~resail_pipeline.devices.matmul_rates`)."""
    rates = matmul_rates()
    fp32, bf16 = rates[torch.float32], rates[torch.bfloat16]
    logger.info(
        "matrix products on this CPU: fp32 %.0f GFLOP/s, bf16 %.0f: %s is the faster",
        fp32 / 1e9,
        bf16 / 1e9,
        "bf16" if bf16 > fp32 else "fp32",
    )
    return bf16 > fp32


def load_model(
    path: str | Path, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
) -> PreTrainedModel:
    """The causal LM of a local checkpoint directory, on ``device`` (see :func:`resolve_device`)."""
    from safetensors import SafetensorError

    path = check_checkpoint(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(path), trust_remote_code=False, use_safetensors=True, dtype=dtype or torch.float32
        )
    except (SafetensorError, OSError, ValueError) as error:  # truncated or foreign weights
        raise CheckpointError(f"checkpoint {path}: its weights do not load ({error})") from None
    return model.to(resolve_device(device))


def load_policy(
    path: str | Path, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
):
    """``(model, tokenizer)`` from a local checkpoint directory, the model on ``device``."""
    return load_model(path, dtype, device), load_tokenizer(path)


@dataclass(frozen=True)
class CheckpointInfo:
    """What the catalog records of a published checkpoint (the ``checkpoints`` schema)."""

    policy_id: str
    path: str
    parent_id: str
    method: str
    cycle: int
    sha256: str

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    def to_frame(self) -> pd.DataFrame:
        """The one-row ``checkpoints`` table of this checkpoint."""
        return pd.DataFrame([self.to_row()])

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, source: str = "checkpoint") -> CheckpointInfo:
        """The info in a one-row ``checkpoints`` table; the directory must be loadable."""
        check_columns(frame, "checkpoints", source=source)
        if len(frame) != 1:
            raise ValueError(f"{source}: expected one checkpoint row, got {len(frame)}")
        row = frame.iloc[0]
        info = cls(**{name: row[name] for name in cls.__dataclass_fields__})
        check_checkpoint(info.path)
        return replace(info, cycle=int(info.cycle))


def save_policy(
    model: PreTrainedModel,
    tokenizer: Any,
    path: str | Path,
    *,
    name: str,
    parent_id: str = "",
    method: str = "",
    cycle: int = 0,
    extra: dict[str, Any] | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
    image_processor: Any = None,
) -> CheckpointInfo:
    """Write ``model`` + ``tokenizer`` (+ a vision model's ``image_processor``) to ``path``
    atomically, with a manifest; return its info.

    ``state_dict`` replaces the model's own weights (e.g. gathered from ZeRO-3 partitions).
    """
    path = Path(path)
    with atomic_path(path) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True, state_dict=state_dict)
        tokenizer.save_pretrained(str(tmp))
        if image_processor is not None:
            image_processor.save_pretrained(str(tmp))
        sha = weights_sha256(tmp)
        info = CheckpointInfo(
            policy_id=f"{name}@{sha[:12]}",
            path=str(path),
            parent_id=parent_id,
            method=method,
            cycle=cycle,
            sha256=sha,
        )
        write_manifest(tmp, {**info.to_row(), "files_sha256": files_sha256(tmp), **(extra or {})})
    return info


def write_manifest(directory: str | Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` as the checkpoint's :data:`MANIFEST_NAME`, atomically (the one format:
    sorted keys, indented, so that a changed manifest reads as a small diff)."""
    with atomic_path(Path(directory) / MANIFEST_NAME) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def read_checkpoint_info(
    path: str | Path, *, known_sha256: str | None = None, **defaults: Any
) -> CheckpointInfo:
    """The info of a checkpoint directory: from its manifest, or computed for a foreign one.

    ``known_sha256``: the weights' hash, already verified by the caller (at the paper's scale a
    hash reads 8-16 GB); otherwise the weights are hashed here.
    """
    path = check_checkpoint(path)
    manifest = read_manifest(path)
    sha = known_sha256 if known_sha256 is not None else weights_sha256(path)
    if manifest is not None:
        fields = {k: manifest[k] for k in CheckpointInfo.__dataclass_fields__ if k in manifest}
        fields.update(path=str(path), sha256=sha)
        fields.setdefault("policy_id", f"{path.name}@{sha[:12]}")
        return CheckpointInfo(**{**_defaults(), **defaults, **fields})
    return CheckpointInfo(
        **{
            **_defaults(),
            **defaults,
            "policy_id": f"{path.name}@{sha[:12]}",
            "path": str(path),
            "sha256": sha,
        }
    )


def _defaults() -> dict[str, Any]:
    return {"parent_id": "", "method": "", "cycle": 0}


def enable_activation_checkpointing(model: PreTrainedModel) -> None:
    """Recompute ``model``'s decoder activations in backward.

    ``activation_checkpointing_enable`` is the name from transformers 5.23 on; the versions before
    it (5.19-5.22, what the ``gpu`` extra resolves beside vLLM 0.32) call it
    ``gradient_checkpointing_enable``. Both are called without arguments.
    """
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is None:
        enable = model.gradient_checkpointing_enable
    enable()


def optimizer_tensors(
    optimizer: torch.optim.Optimizer, prefix: str = ""
) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """An optimiser's state as a resumable training state keeps it, without pickle: its
    per-parameter tensors (AdamW's moments and step counts) as flat CPU copies named
    ``{prefix}{index}.{name}`` for safetensors, and its parameter groups (JSON-serialisable).
    :func:`load_optimizer_tensors` reads them back. The behaviour-cloning state and the
    trainer's snapshots both keep theirs so."""
    state = optimizer.state_dict()
    tensors = {
        f"{prefix}{index}.{name}": value.detach().to("cpu", copy=True)
        for index, entries in state["state"].items()
        for name, value in entries.items()
    }
    return tensors, state["param_groups"]


def load_optimizer_tensors(
    optimizer: torch.optim.Optimizer,
    tensors: dict[str, torch.Tensor],
    param_groups: list[dict[str, Any]],
    prefix: str = "",
) -> None:
    """Set ``optimizer`` to what :func:`optimizer_tensors` gave (tensors without ``prefix`` are
    left out); the optimiser moves each tensor to its parameter's device and dtype."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith(prefix):
            index, _, name = key[len(prefix) :].partition(".")
            state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": param_groups})
