"""Time and peak memory of one ReSAIL loss evaluation: top-K + tail against full-vocabulary softmaxes.

One evaluation is the forward and backward pass of the ReSAIL loss (SGS top rho = 0.25, TLB,
privileged retention with lambda = 1) over all four views: student ordinary and privileged
(with gradient), teacher ordinary and privileged (frozen). The logits are random **bf16**
tensors of shape ``(N, T, V) = (8, 128, 151936)``: 1,024 response positions over Qwen3's
vocabulary, as a bf16 model produces them. Variants:

- ``topk``: :func:`resail_pipeline.objectives.resail_loss` with K = 20, all positions at once;
- ``topk-chunked``: the same with ``chunk_size = 128`` positions per block;
- ``full``: the same loss written the straightforward way: fp32 ``log_softmax`` over the whole
  vocabulary for every view, KL and JSD summed over V, then the same selection and reductions
  (:func:`resail_pipeline.objectives.resail_objective`).

Memory. Each variant runs in a fresh Python process, so no allocation of one can be reused by
another. The process allocates the four logits tensors (filled row block by row block, so the
allocation itself has no large transient), reads its resident set size (``VmRSS``) as the
baseline, and resets the kernel's peak-RSS counter (writing ``5`` to ``/proc/self/clear_refs``).
After one evaluation the counter (``VmHWM``) minus the baseline is the evaluation's peak memory
beyond its inputs; it includes the gradients of the two student views (2 x the size of one
logits tensor), which both variants produce. Without ``clear_refs`` (non-Linux) the script falls
back to ``ru_maxrss`` after minus ``ru_maxrss`` before, which is the same when allocating the
inputs was their own peak. Large CPU allocations are returned to the system when freed, so RSS
follows the tensors that are alive.

Time. The median wall time of ``--repeats`` further evaluations in the same process (gradients
cleared between them), after the measured one.

Exactness. On a small vocabulary with K = V the top-K + tail loss and its gradients equal the
full-vocabulary ones; the script checks and prints that first. At K = 20 the two losses differ on
these random logits, whose near-uniform distributions put most of their mass in the tail.

Stages (``--micro``). The median times of the parts of one view's reduction on ``(2, 128, V)``
logits, fp32 and bf16: :func:`~resail_pipeline.objectives.topk_support` (``torch.topk``), the
forward and the backward of :func:`~resail_pipeline.objectives.topk_tail_logprobs`, and, side by
side, the same ``(K + 1)`` log-probabilities from an fp32 ``log_softmax`` over the vocabulary
(forward + backward).

Threads. ``--threads`` sets PyTorch's intra-op threads in every process (default: PyTorch's
choice). On cores shared with other busy processes every parallel operation can wait a scheduler
tick for its threads, which penalises many small operations over few large ones; compare
variants within one run, and ``--threads 1`` against the default when the machine is loaded.

    .venv/bin/python benchmarks/objectives_topk.py               # minutes; up to ~7 GB resident
    .venv/bin/python benchmarks/objectives_topk.py --vocab 32768  # smaller, faster
    .venv/bin/python benchmarks/objectives_topk.py --micro        # the stages of one view
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
from torch import Tensor

from resail_pipeline.devices import machine_header
from resail_pipeline.objectives import (
    ResailConfig,
    masked_token_mean,
    resail_loss,
    resail_objective,
    topk_support,
    topk_tail_logprobs,
)

VARIANTS = ("topk", "topk-chunked", "full")
QWEN3_VOCAB = 151_936
STEPS, POSITIONS = 8, 128  # N x T = 1,024 response positions
TRAJECTORIES = 4  # |B|: two steps per trajectory
CHUNK = 128
MICRO_POSITIONS = (2, 128)  # (B, T) of the --micro view
CONFIG = ResailConfig(selection="top", rho=0.25, balancing=True, retention="privileged", lam=1.0)
_LN2 = math.log(2.0)


# ----------------------------------------------------------------------------------------------
# the loss written the straightforward way


def _kl_full(logp: Tensor, logq: Tensor) -> Tensor:
    """``sum_v p_v (log p_v - log q_v)``: ``(N, T, V)`` -> ``(N, T)``."""
    return (logp.exp() * (logp - logq)).sum(dim=-1)


def _jsd_full(logp: Tensor, logq: Tensor) -> Tensor:
    logm = torch.logaddexp(logp, logq) - _LN2  # (N, T, V)
    return 0.5 * (_kl_full(logp, logm) + _kl_full(logq, logm))


def full_vocab_loss(
    views: dict[str, Tensor], mask: Tensor, traj_index: Tensor, config: ResailConfig
):
    """The ReSAIL loss with fp32 full-vocabulary softmaxes for every view."""
    s_ord = torch.log_softmax(views["student_ord"].float(), dim=-1)  # (N, T, V)
    s_priv = torch.log_softmax(views["student_priv"].float(), dim=-1)  # (N, T, V)
    with torch.no_grad():
        t_ord = torch.log_softmax(views["teacher_ord"].float(), dim=-1)  # (N, T, V)
        t_priv = torch.log_softmax(views["teacher_priv"].float(), dim=-1)  # (N, T, V)
        scores = masked_token_mean(_jsd_full(t_ord, t_priv), mask)  # (N,)
    l_dist = masked_token_mean(_kl_full(s_ord, t_priv), mask)  # (N,)
    l_ret = masked_token_mean(_kl_full(s_priv, t_priv), mask)  # (N,)
    return resail_objective(l_dist, traj_index, TRAJECTORIES, config, scores=scores, l_ret=l_ret)[0]


def topk_loss(
    views: dict[str, Tensor],
    mask: Tensor,
    traj_index: Tensor,
    config: ResailConfig,
    chunk_size: int | None,
):
    return resail_loss(
        views["student_ord"],
        views["teacher_ord"],
        views["teacher_priv"],
        mask,
        traj_index,
        TRAJECTORIES,
        config,
        student_priv_logits=views["student_priv"],
        chunk_size=chunk_size,
    )[0]


def evaluate(variant: str, views: dict[str, Tensor], mask: Tensor, traj_index: Tensor) -> float:
    """One forward + backward pass; returns the loss."""
    for name in ("student_ord", "student_priv"):
        views[name].grad = None
    if variant == "full":
        loss = full_vocab_loss(views, mask, traj_index, CONFIG)
    else:
        loss = topk_loss(
            views, mask, traj_index, CONFIG, CHUNK if variant == "topk-chunked" else None
        )
    loss.backward()
    return float(loss.detach())


# ----------------------------------------------------------------------------------------------
# inputs and measurement


def make_views(vocab: int, dtype: torch.dtype, seed: int = 0) -> dict[str, Tensor]:
    """Four random ``(N, T, V)`` logits tensors, filled one step at a time."""
    generator = torch.Generator().manual_seed(seed)
    views = {}
    for name in ("student_ord", "student_priv", "teacher_ord", "teacher_priv"):
        x = torch.empty(STEPS, POSITIONS, vocab, dtype=dtype)  # (N, T, V)
        for i in range(STEPS):
            x[i] = 3.0 * torch.randn(POSITIONS, vocab, generator=generator)  # (T, V)
        views[name] = x.requires_grad_(name.startswith("student"))
    return views


def batch_layout() -> tuple[Tensor, Tensor]:
    mask = torch.ones(STEPS, POSITIONS, dtype=torch.bool)  # (N, T): every position valid
    traj_index = torch.arange(STEPS) // (STEPS // TRAJECTORIES)  # (N,)
    return mask, traj_index


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _maxrss_kib() -> int:
    scale = 1024 if sys.platform == "darwin" else 1  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // scale


def worker(variant: str, vocab: int, repeats: int) -> dict:
    """Run in a fresh process: the measured evaluation, then the timed ones."""
    views = make_views(vocab, torch.bfloat16)
    mask, traj_index = batch_layout()
    if _reset_peak():
        baseline, method = _status_kib("VmRSS"), "VmHWM after clear_refs"
        measure = lambda: _status_kib("VmHWM")  # noqa: E731
    else:
        baseline, method = _maxrss_kib(), "ru_maxrss"
        measure = _maxrss_kib
    start = time.perf_counter()
    loss = evaluate(variant, views, mask, traj_index)
    first_s = time.perf_counter() - start
    peak = measure() - baseline
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        evaluate(variant, views, mask, traj_index)
        times.append(time.perf_counter() - start)
    return {
        "variant": variant,
        "loss": loss,
        "first_s": first_s,
        "median_s": statistics.median(times) if times else first_s,
        "peak_mib": peak / 1024,
        "inputs_mib": sum(v.numel() * v.element_size() for v in views.values()) / 2**20,
        "method": method,
        "threads": torch.get_num_threads(),
    }


def run_worker(variant: str, vocab: int, repeats: int, threads: int | None) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--worker", variant]
    command += ["--vocab", str(vocab), "--repeats", str(repeats)]
    if threads is not None:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{variant}: worker failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------
# the stages of one view


def _full_topk_tail(logits: Tensor, support: Tensor) -> Tensor:
    """The ``(K + 1)`` log-probabilities from an fp32 log-softmax over the vocabulary."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    tail = torch.logsumexp(logp.scatter(-1, support, float("-inf")), dim=-1, keepdim=True)
    return torch.cat([logp.gather(-1, support), tail], dim=-1)  # (B, T, K+1)


def micro(vocab: int, repeats: int) -> None:
    """Print the median time of each stage of one view's reduction, fp32 and bf16 logits."""
    generator = torch.Generator().manual_seed(2)
    base = 3.0 * torch.randn(*MICRO_POSITIONS, vocab, generator=generator)  # (B, T, V)
    weights = torch.randn(*MICRO_POSITIONS, CONFIG.top_k + 1, generator=generator)  # (B, T, K+1)
    stages = ("topk_support", "forward", "backward", "full-V fwd+bwd")
    print(
        f"one view of logits {(*MICRO_POSITIONS, vocab)}, K = {CONFIG.top_k}, "
        f"threads: {torch.get_num_threads()}; median of {repeats} (ms)"
    )
    print(f"{'dtype':<10}" + "".join(f"{name:>18}" for name in stages))
    for dtype in (torch.float32, torch.bfloat16):
        x = base.to(dtype).requires_grad_()
        times: dict[str, list[float]] = {name: [] for name in stages}
        for i in range(repeats + 1):  # the first round warms up
            x.grad = None
            t0 = time.perf_counter()
            support = topk_support(x, CONFIG.top_k)  # (B, T, K)
            t1 = time.perf_counter()
            out = topk_tail_logprobs(x, support)  # (B, T, K+1)
            t2 = time.perf_counter()
            out.backward(weights)
            t3 = time.perf_counter()
            x.grad = None
            _full_topk_tail(x, support).backward(weights)
            t4 = time.perf_counter()
            if i:
                for name, dt in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                    times[name].append(dt)
        row = "".join(f"{1e3 * statistics.median(times[name]):>18.0f}" for name in stages)
        print(f"{str(dtype).removeprefix('torch.'):<10}{row}")


# ----------------------------------------------------------------------------------------------
# K = V exactness


def check_exact(vocab: int = 64) -> tuple[float, float, float]:
    """Loss and gradient differences of top-K (K = V) against the full-vocabulary loss (fp32)."""
    generator = torch.Generator().manual_seed(1)
    shape = (STEPS, 5, vocab)
    base = {
        name: 3.0 * torch.randn(shape, generator=generator)
        for name in ("student_ord", "student_priv", "teacher_ord", "teacher_priv")
    }
    mask = torch.rand(shape[:2], generator=generator) < 0.8  # (N, T) with padding
    mask[:, 0] = True
    traj_index = batch_layout()[1]
    config = ResailConfig(
        selection="top", rho=0.25, balancing=True, retention="privileged", lam=1.0, top_k=vocab
    )
    results = []
    for name in ("topk", "full"):
        views = {k: v.clone().requires_grad_(k.startswith("student")) for k, v in base.items()}
        if name == "full":
            loss = full_vocab_loss(views, mask, traj_index, config)
        else:
            loss = topk_loss(views, mask, traj_index, config, chunk_size=None)
        loss.backward()
        results.append((loss.detach(), views["student_ord"].grad, views["student_priv"].grad))
    (loss_k, g_ord_k, g_priv_k), (loss_f, g_ord_f, g_priv_f) = results
    return (
        abs(float(loss_k - loss_f)),
        float((g_ord_k - g_ord_f).abs().max()),
        float((g_priv_k - g_priv_f).abs().max()),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=QWEN3_VOCAB)
    parser.add_argument("--repeats", type=int, default=3, help="timed evaluations per variant")
    parser.add_argument("--threads", type=int, help="PyTorch intra-op threads in every process")
    parser.add_argument("--micro", action="store_true", help="time the stages of one view")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads: must be positive, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(worker(args.worker, args.vocab, args.repeats)))
        return
    print(machine_header())
    if args.micro:
        micro(args.vocab, max(args.repeats, 1))
        return

    d_loss, d_ord, d_priv = check_exact()
    print(
        f"K = V = 64 (fp32): |loss difference| {d_loss:.2e}, max |gradient difference| "
        f"student ordinary {d_ord:.2e}, student privileged {d_priv:.2e}"
    )
    if max(d_loss, d_ord, d_priv) > 1e-5:
        raise SystemExit("top-K + tail with K = V does not match the full-vocabulary loss")

    results = {v: run_worker(v, args.vocab, args.repeats, args.threads) for v in VARIANTS}
    first = results["full"]
    print(
        f"\nReSAIL loss, forward + backward, four views of bf16 logits "
        f"({STEPS}, {POSITIONS}, {args.vocab}) = {first['inputs_mib']:.0f} MiB in all; "
        f"K = 20; threads: {first['threads']}; peak from {first['method']}"
    )
    print(f"{'variant':<14}{'loss':>12}{'median s':>11}{'first s':>10}{'peak MiB':>11}")
    for v in VARIANTS:
        r = results[v]
        print(
            f"{v:<14}{r['loss']:>12.5f}{r['median_s']:>11.2f}{r['first_s']:>10.2f}"
            f"{r['peak_mib']:>11.0f}"
        )
    print()
    for v in ("topk", "topk-chunked"):
        r = results[v]
        print(
            f"{v} / full: time {r['median_s'] / first['median_s']:.3f}, "
            f"peak memory {r['peak_mib'] / first['peak_mib']:.3f}"
        )


if __name__ == "__main__":
    main()
