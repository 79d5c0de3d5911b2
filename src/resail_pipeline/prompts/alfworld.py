"""ALFWorld text-agent templates (appendix G, "ALFWorld: first-step / later-step input")."""

from __future__ import annotations

FIRST_STEP = (
    "You are an expert agent operating in the ALFRED Embodied Environment.\n"
    "Your current observation is: {observation}\n"
    "Your admissible actions of the current situation are: {admissible_actions}\n"
    "\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <thinking> </thinking> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags."
)

LATER_STEP = (
    "You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: "
    "{task}\n"
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
    "{history_length} observations and the corresponding actions you took: {history}\n"
    "You are now at step {current_step} and your current observation is: {observation}\n"
    "Your admissible actions of the current situation are: {admissible_actions}\n"
    "\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <thinking> </thinking> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags."
)

#: The admissible-action list: "[\n '<A1>'\n '<A2>'\n ...\n '<AN>']."
ADMISSIBLE_OPEN = "[\n"
ADMISSIBLE_ITEM = " '{action}'"
ADMISSIBLE_CLOSE = "]."

HISTORY_RECORD = "[Observation {index}: '{observation}', Action {index}: '{action}']"
