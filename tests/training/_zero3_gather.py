"""Run by test_distributed.py in a process of its own (DeepSpeed initialises a process group):
the most parameters a ZeRO-3 student holds gathered at once during one forward, as a share of all,
printed as ``gathered <share>``; the student is built as the trainer builds it for ZeRO-3."""

from __future__ import annotations

import os

import torch

os.environ.update(MASTER_ADDR="127.0.0.1", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
os.environ.setdefault("MASTER_PORT", "29533")

import deepspeed

from resail_pipeline.modeling import build_qwen3, build_word_tokenizer, small_qwen3_config
from resail_pipeline.training.config import EngineConfig
from resail_pipeline.training.views import ResponseLogits

tokenizer = build_word_tokenizer(["craft a stick from oak planks and an oak log"])
config = small_qwen3_config(
    len(tokenizer),
    hidden_size=320,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=640,
    pad_token_id=tokenizer.pad_token_id,
    eos_token_id=tokenizer.eos_token_id,
)
model = build_qwen3(config, seed=0)
engine = EngineConfig(kind="deepspeed", zero_stage=3, world_size=1, precision="fp32")
student = ResponseLogits(model, functional=engine.functional_student)
total = sum(p.numel() for p in model.parameters())
wrapped, *_ = deepspeed.initialize(
    model=student,
    optimizer=torch.optim.AdamW(student.parameters(), lr=1e-3),
    config={
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0},
        "zero_allow_untested_optimizer": True,
    },
)
most = 0


def count(*_args) -> None:
    global most
    most = max(most, sum(p.numel() for p in model.parameters() if p.numel() > 0))


for module in model.modules():
    module.register_forward_pre_hook(count)
    module.register_forward_hook(count)
ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
logits = wrapped(ids, torch.ones_like(ids), torch.arange(6)[None], torch.tensor([[5]]))
count()
assert logits.shape == (1, 1, len(tokenizer)), logits.shape
print(f"gathered {most / total:.3f}")
