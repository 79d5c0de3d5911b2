"""What behaviour cloning of the initial policy costs on the pipeline's own prompts.

On the demonstrations of the first train tasks it prints, side by side:

1. prompt lengths (tokens per step, chat template included) with a plain word-level tokenizer and
   with the template fragments as single tokens;
2. the tokens one pass over the data costs: every sequence on its own, identical sequences
   merged, and packed behind shared prefixes (the ordinary and privileged views of a step);
3. training throughput of the default model on the same batches: packed rows with the tree mask
   against the same sequences unpacked (causal mask), in fp32 and in bf16 autocast, as padded
   tokens per second and as trained sequences per second. The variants run interleaved for a few
   rounds; the best round shows the machine's speed, as load from other processes only slows a
   round down.

    .venv/bin/python benchmarks/bootstrap_training.py [--tasks 40] [--steps 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from contextlib import nullcontext

import torch

from resail_pipeline.bootstrap.build import qwen3_config
from resail_pipeline.bootstrap.cloning import batch_loss, training_precision
from resail_pipeline.bootstrap.config import BootstrapConfig
from resail_pipeline.bootstrap.demonstrations import collect_demonstrations
from resail_pipeline.bootstrap.packing import Branch, PackedRow, collate, group_steps, pack_rows
from resail_pipeline.bootstrap.vocabulary import environment_corpus, train_tokenizer
from resail_pipeline.checkpoints import bf16_faster, bf16_native
from resail_pipeline.devices import machine_header
from resail_pipeline.envs import make_env
from resail_pipeline.modeling import build_qwen3, build_word_tokenizer
from resail_pipeline.prompts import chat_prompt, render_user_message


def unpacked(rows: list[PackedRow]) -> list[PackedRow]:
    """Every branch of ``rows`` as a row of its own (one sequence, causal)."""
    out = []
    for row in rows:
        for ids, prompt_len, weight in row.sequences():
            out.append(
                PackedRow(
                    tuple(ids[:prompt_len]), (Branch(tuple(ids[prompt_len:]), 0, weight, False),)
                )
            )
    return out


def throughput(model, rows, pad_id, budget, steps, precision) -> tuple[float, float]:
    """(padded tokens/s, sequences/s) of ``steps`` optimiser steps on length-bucketed batches."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    batches, current = [], []
    for i in order[len(order) // 3 :]:  # typical lengths, not the shortest third
        if current and (len(current) + 1) * len(rows[i]) > budget:
            batches.append(current)
            current = []
        current.append(i)
    random.Random(0).shuffle(batches)
    batches = batches[: steps + 1]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else nullcontext()
    tokens = sequences = 0
    start = 0.0
    for k, b in enumerate(batches):
        if k == 1:  # the first step warms up
            start = time.perf_counter()
            tokens = sequences = 0
        batch = collate([rows[i] for i in b], pad_id)
        with autocast:
            loss = batch_loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        tokens += batch.tokens
        sequences += sum(len(rows[i].branches) for i in b)
    seconds = time.perf_counter() - start
    return tokens / seconds, sequences / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=40, help="train tasks to demonstrate")
    parser.add_argument("--steps", type=int, default=4, help="optimiser steps per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions")
    args = parser.parse_args()
    config = BootstrapConfig()
    torch.set_num_threads(config.training.threads)
    print(machine_header())
    data = config.data
    task_ids = make_env("textcraft").task_ids("train")[: args.tasks]
    demos = collect_demonstrations(
        "textcraft",
        task_ids,
        episodes_per_task=data.episodes_per_task,
        mistake_rate=data.mistake_rate,
        stalled_share=data.stalled_share,
        seed=0,
        progress=False,
    )
    trained = [d for d in demos if not d.stalled]
    tokenizer = train_tokenizer("textcraft", demos, vocab_size=4096)
    plain = build_word_tokenizer(environment_corpus("textcraft", demos))
    messages = [render_user_message(s.history) for d in trained for s in d.steps]
    with_phrases = [len(tokenizer(chat_prompt(tokenizer, m)).input_ids) for m in messages]
    words = [len(plain(chat_prompt(plain, m)).input_ids) for m in messages]
    print(
        f"{len(task_ids)} train tasks, {len(trained)} trained demonstrations, {len(messages)} steps"
    )
    print("prompt tokens per step (mean / median / max):")
    print(
        f"  word-level            {statistics.mean(words):7.1f} {statistics.median(words):7.0f} {max(words):6d}"
    )
    print(
        f"  + template phrases    {statistics.mean(with_phrases):7.1f} {statistics.median(with_phrases):7.0f} {max(with_phrases):6d}"
    )

    groups = group_steps(trained, demos, privileged_share=data.privileged_share, seed=0)
    rows = pack_rows(groups, tokenizer, max_branches=data.max_branches)
    single = unpacked(rows)
    every = sum(len(r) * r.branches[0].weight for r in single)
    merged = sum(len(r) for r in single)
    packed = sum(len(r) for r in rows)
    print("tokens of one pass over the data:")
    print(f"  every sequence on its own   {every:10.0f}")
    print(f"  identical sequences merged  {merged:10d}  ({every / merged:.2f}x fewer)")
    print(f"  packed behind shared trunks {packed:10d}  ({every / packed:.2f}x fewer)")

    shape = config.model
    model_config = qwen3_config(shape, tokenizer)
    budget = config.training.batch_tokens
    print(
        f"training throughput, {shape.num_hidden_layers} layers x {shape.hidden_size}, "
        f"{budget} padded tokens per batch, {torch.get_num_threads()} threads, "
        f"best and median of {args.rounds} interleaved rounds "
        f"(native bf16 on this CPU: {bf16_native(torch.device('cpu'))}, faster than fp32: "
        f"{bf16_faster(torch.device('cpu'))}, so `auto` trains in "
        f"{training_precision('auto', torch.device('cpu'))}):"
    )
    variants = [
        (name, precision, data_rows)
        for precision in ("fp32", "bf16")
        for name, data_rows in (("packed", rows), ("unpacked", single))
    ]
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):  # interleaved, so load from other processes hits every variant
        for name, precision, data_rows in variants:
            model = build_qwen3(model_config, seed=0).train()
            measured = throughput(
                model, data_rows, tokenizer.pad_token_id, budget, args.steps, precision
            )
            results.setdefault((name, precision), []).append(measured)
    print(f"  {'layout':10s} {'precision':9s} {'tokens/s':>17s} {'sequences/s':>17s}")
    for (name, precision), values in results.items():
        tok_s = sorted(v[0] for v in values)
        seq_s = sorted(v[1] for v in values)
        print(
            f"  {name:10s} {precision:9s} {tok_s[-1]:8.0f} {statistics.median(tok_s):8.0f} "
            f"{seq_s[-1]:8.2f} {statistics.median(seq_s):8.2f}"
        )
    print("  (best, median; other processes on the machine only slow a round down)")


if __name__ == "__main__":
    main()
