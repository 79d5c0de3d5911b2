"""The generation protocol's shared pieces: sampling settings and per-response seeds."""

from __future__ import annotations

import pytest

from resail_pipeline.generation import SamplingParams, derive_seed, response_seeds


def test_derived_seeds_are_fixed_63_bit_and_sensitive_to_every_part():
    assert derive_seed(3, 1) == derive_seed(3, 1)
    seeds = {derive_seed(a, b) for a in range(20) for b in range(20)}
    assert len(seeds) == 400
    assert all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(1, 2) != derive_seed(2, 1)
    assert derive_seed(5) != derive_seed(5, 0)
    assert derive_seed(2**32 * 7 + 3) != derive_seed(3, 7)


def test_derived_seeds_reject_negative_or_missing_parts():
    with pytest.raises(ValueError, match="seed parts"):
        derive_seed(1, -1)
    with pytest.raises(ValueError, match="seed parts"):
        derive_seed(2**64)
    with pytest.raises(ValueError, match="seed parts"):
        derive_seed()


def test_response_seeds_are_prompt_major_and_keyed_by_prompt_and_sample():
    params = SamplingParams(seed=11, n=2)
    default = response_seeds(3, params)
    assert default == [derive_seed(derive_seed(11, i), j) for i in range(3) for j in range(2)]
    assert len(set(default)) == 6
    given = response_seeds(2, params, seeds=[40, 41])
    assert given == [derive_seed(40, 0), derive_seed(40, 1), derive_seed(41, 0), derive_seed(41, 1)]
    with pytest.raises(ValueError, match="seeds: expected one per prompt"):
        response_seeds(3, params, seeds=[1])


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("temperature", {"temperature": -0.1}),
        ("top_p", {"top_p": 0.0}),
        ("top_p", {"top_p": 1.5}),
        ("top_k", {"top_k": 0}),
        ("top_k", {"top_k": -2}),
        ("max_new_tokens", {"max_new_tokens": 0}),
        ("seed", {"seed": -1}),
        ("n", {"n": 0}),
    ],
)
def test_sampling_params_name_the_bad_field(field, kwargs):
    with pytest.raises(ValueError, match=f"^{field}:"):
        SamplingParams(**kwargs)
