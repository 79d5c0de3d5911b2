"""Generations compared as far as a processor's kernels let them agree.

A prompt decoded at another batch position, or in a batch of another size (two shards split one
batch), goes through kernels that block and round differently on some processors (AVX-512 without
AMX: in the seventh digit of a log-prob). Tokens, text and the end flag must still agree; the
log-probs agree to rounding.
"""

from __future__ import annotations

import torch

from resail_pipeline.generation import Generation

#: absolute tolerance of a log-prob computed at another batch position
LOGPROB_ATOL = 1e-5


def assert_same_generations(got: list[Generation], want: list[Generation]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert (a.text, a.token_ids, a.finished) == (b.text, b.token_ids, b.finished)
        torch.testing.assert_close(
            torch.tensor(a.logprobs, dtype=torch.float64),
            torch.tensor(b.logprobs, dtype=torch.float64),
            atol=LOGPROB_ATOL,
            rtol=0,
        )
