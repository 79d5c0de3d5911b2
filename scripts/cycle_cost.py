"""A cycle's training-loop cost in GPU-hours at the paper's settings, estimated from the
configuration's budgets and the rates the GPU check measured (the scope of the paper's table 6:
the responses sampled in the loop, the teacher's scoring, the student's optimisation; collection
and evaluation are not in it)::

    .venv/bin/python scripts/cycle_cost.py

For each environment's paper configuration (``conf/paper-textcraft``, ``conf/paper``), model shape
(Qwen3-4B, Qwen3-8B) and method (OEL, OEL + ReSAIL): an update holds ``trajectories_per_update``
trajectories of ``--steps`` steps each, split evenly over the ranks (``world_size``: 8). Every step
gets a fresh response from the in-loop sampler, ``responses.batch_size`` rows a decode batch; a
batch takes ``--decode-tokens`` decode steps (every row runs to ``max_tokens`` unless set lower:
a batch lasts as long as its longest row), each as long as the GPU check measured for 8 rows of
Qwen3-4B on an H200 (eager, launch-bound, so taken as the same for up to a batch of rows) times
the ratio of the model's parameters. Scoring and optimisation take the GPU check's per-row seconds
per token of its rows, scaled by parameters: the teacher scores every step (ReSAIL both views);
OEL optimises every step with one branch, ReSAIL its selected share (``rho``) with two and the rest
with the privileged retention branch. These are estimates from one measurement on one GPU (the
in-loop sampler eager, as it runs now), not measurements of a cycle.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: the GPU check's scale step (Qwen3-4B, random weights, one H200)
MEASURED = ROOT / "docs" / "logs" / "gpu_check-nvidia-h200-scale.json"
#: each environment's paper configuration, its longest privileged prompt in Qwen3 tokens
#: (scripts/qwen3_prompts.py) and an assumed mean episode length in steps
SETTINGS = {
    "textcraft": (ROOT / "conf" / "paper-textcraft" / "parameters.yml", 3929, 15),
    "alfworld": (ROOT / "conf" / "paper" / "parameters.yml", 8437, 20),
}
SHAPES = {"Qwen3-4B": 4.02e9, "Qwen3-8B": 8.19e9}
#: the paper's table 6: ALFWorld, cycle 1, Qwen3-4B, eight H800s (GPU-hours)
PAPER = {"oel": 4.33, "oel_resail": 5.32}


def measured_rates() -> dict[str, float]:
    """Seconds per decode step (8 rows) and per training row, and the row length, of the scale
    step the GPU check ran."""
    details = json.loads(MEASURED.read_text())["checks"]["scale"]["details"]
    decoding, training = details["decoding"], details["training"]
    steps = decoding["generated_tokens"] / decoding["prompts"]
    rows = training["rows_per_update"]
    return {
        "decode_step_s": decoding["seconds"] / steps,
        "score_row_s": training["update_2_s"]["scoring"] / rows,
        "optimise_row_s": training["update_2_s"]["optimisation"] / rows,
        "row_tokens": max(training["row_tokens"]),
        "parameters": details["parameters"],
    }


def cycle_cost(
    env: str, shape: str, method: str, steps: int, decode_tokens: int | None
) -> dict[str, float]:
    """GPU-hours of one cycle's training loop, by part."""
    path, prompt, _ = SETTINGS[env]
    train = yaml.safe_load(path.read_text())["train"]
    rates = measured_rates()
    world = 8
    updates = train["schedule"]["updates"]
    per_rank = math.ceil(train["schedule"]["trajectories_per_update"] * steps / world)
    responses = train["responses"]
    tokens = decode_tokens or responses["max_tokens"]
    size = SHAPES[shape] / rates["parameters"]
    batches = math.ceil(per_rank / responses["batch_size"])
    sample = batches * tokens * rates["decode_step_s"] * size
    resail = method == "oel_resail"
    response = responses["max_tokens"]
    rho = train.get("resail", {}).get("rho", 0.05)
    one, two = prompt + response, prompt + 2 * response  # a row with one view's branch, or two
    # the teacher's targets on every step; ReSAIL scores both views (its PI sensitivity)
    scored = per_rank * (two if resail else one)
    # OEL distils every step; ReSAIL its selected share (both branches) and retains the rest
    optimised = per_rank * ((rho * two + (1 - rho) * one) if resail else one)
    per_token = size / rates["row_tokens"]
    score = scored * rates["score_row_s"] * per_token
    optimise = optimised * rates["optimise_row_s"] * per_token
    hours = {
        "response": sample,
        "scoring": score,
        "optimisation": optimise,
    }
    return {part: world * updates * seconds / 3600 for part, seconds in hours.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decode-tokens", type=int, help="decode steps a batch takes")
    args = parser.parse_args()
    print("env        model     method      response  scoring  optimisation  total  (GPU-h)")
    for env, (_, _, steps) in SETTINGS.items():
        for shape in SHAPES:
            for method in ("oel", "oel_resail"):
                parts = cycle_cost(env, shape, method, steps, args.decode_tokens)
                total = sum(parts.values())
                print(
                    f"{env:10} {shape:9} {method:11} {parts['response']:8.2f} "
                    f"{parts['scoring']:8.2f} {parts['optimisation']:13.2f} {total:6.2f}"
                )
    print(f"paper, table 6 (ALFWorld, Qwen3-4B, 8 H800s, with its 'other'): {PAPER}")


if __name__ == "__main__":
    main()
