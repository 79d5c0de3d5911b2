"""Worst-case time of the parsers of model output on hostile text, 128 KB to 1 MB.

Model output is untrusted: an action parser or summary validator that backtracks over a long run
of tags or spaces stalls a whole rollout. This script times ``parse_action``, ``strip_thinking``
and ``validate_summary`` (with a trajectory's evidence, so the copy rule runs too), and the GUI
path's ``accepted_remark``, ``predicted_action`` and ``without_placeholders``, on inputs built to defeat backtracking, at
three sizes, and prints each time and the worst per function. Linear scans keep every call far
below the 50 ms the hardening issue allows at 1 MB.

    .venv/bin/python benchmarks/parsers.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd

from resail_pipeline.devices import machine_header
from resail_pipeline.evaluation.gui_actions import predicted_action
from resail_pipeline.experience.evidence import build_evidence
from resail_pipeline.experience.validation import validate_summary
from resail_pipeline.prompts import parse_action, strip_thinking
from resail_pipeline.prompts.gui import IMAGE_PLACEHOLDER, accepted_remark, without_placeholders

SIZES = (128 * 1024, 512 * 1024, 1024 * 1024)


def hostile(size: int) -> dict[str, str]:
    """Texts of about ``size`` characters that made the replaced regular expressions backtrack."""
    return {
        "open tags": "<action>" * (size // 8),
        "open tags, one close": "<action>" * (size // 8) + "x</action>",
        "close tags": "</action>" * (size // 9),
        "thinking tags": "<thinking>" * (size // 10),
        "spaces in a field": "-" + " " * size + "x",
        "spaces after a heading": "Guidance summary:\n- Checks:" + " " * size + "x",
        "field lines": "- Checks: a\n" * (size // 12),
        "dashes": "-" * size,
        "remark headers": "<remark>\nHow to do:\nWatch out:\n" * (size // 33),
        "open remarks": "<remark>How to do:\n" * (size // 19),
        "open tool calls": "<tool_call>" * (size // 11),
        "nested tool call": "<tool_call>" + "[" * (size // 2) + "]" * (size // 2) + "</tool_call>",
        "nested placeholders": (
            IMAGE_PLACEHOLDER[:7] * (size // 27) + IMAGE_PLACEHOLDER[7:] * (size // 27)
        ),
    }


def _evidence():
    trajectory = {
        "traj_id": "t",
        "env": "textcraft",
        "task": "craft 1 stick",
        "success": True,
        "num_steps": 3,
        "end_reason": "success",
    }
    steps = pd.DataFrame(
        {
            "traj_id": "t",
            "t": range(3),
            "observation": ["Crafting commands:\ncraft 4 stick using 2 planks"] * 3,
            "action": ["get 2 planks", "craft 4 stick using 2 planks", "inventory"],
            "action_valid": True,
            "next_observation": ["Got 2 planks", "Crafted 4 minecraft:stick", "Inventory: [stick]"],
        }
    )
    return build_evidence(trajectory, steps)


def _timed(function: Callable[[str], object], text: str) -> float:
    start = time.perf_counter()
    function(text)
    return time.perf_counter() - start


def main() -> None:
    print(machine_header())
    evidence = _evidence()
    functions = {
        "parse_action": parse_action,
        "strip_thinking": strip_thinking,
        "validate_summary": lambda text: validate_summary(text, "success", evidence),
        "accepted_remark": accepted_remark,
        "predicted_action": predicted_action,
        "without_placeholders": without_placeholders,
    }
    worst = dict.fromkeys(functions, (0.0, ""))
    for size in SIZES:
        for case, text in hostile(size).items():
            for name, function in functions.items():
                seconds = _timed(function, text)
                print(f"{name:20s} {len(text):>9,d} chars  {case:24s} {1e3 * seconds:8.2f} ms")
                if seconds > worst[name][0]:
                    worst[name] = (seconds, f"{case}, {len(text):,d} chars")
    for name, (seconds, case) in worst.items():
        print(f"worst {name}: {1e3 * seconds:.2f} ms ({case})")


if __name__ == "__main__":
    main()
