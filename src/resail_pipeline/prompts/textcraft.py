"""TextCraft text-agent templates (appendix G, "TextCraft: first-step / later-step input")."""

from __future__ import annotations

FIRST_STEP = (
    "You are an expert agent operating in TextCraft, a text-only Minecraft crafting environment.\n"
    "Your current observation is:\n"
    "{observation}\n"
    "\n"
    "Valid actions are:\n"
    "- get N item\n"
    "- inventory\n"
    "- craft N target item using N ingredient, N ingredient\n"
    "\n"
    "Use only the crafting commands listed in the observation. Always include quantities for get "
    "and craft actions.\n"
    "You should first reason step-by-step. This reasoning process MUST be enclosed within "
    "<thinking> </thinking> tags.\n"
    "Then choose exactly one action and present it within <action> </action> tags."
)

LATER_STEP = (
    "You are an expert agent operating in TextCraft. Your goal is: {goal}\n"
    "Prior to this step, you have already taken {step_count} step(s). Recent history: {history}\n"
    "{command_block}"
    "Your current observation is:\n"
    "{observation}\n"
    "\n"
    "Valid actions are: get N item, inventory, or craft N target item using N ingredient, "
    "N ingredient.\n"
    "Use only the crafting commands listed above, in the observation, or already visible in the "
    "recent history.\n"
    "You should first reason step-by-step within <thinking> </thinking> tags.\n"
    "Then choose exactly one action within <action> </action> tags."
)

#: The header of the crafting-command list in TextCraft's initial observation (as the adapter
#: writes it); the first step's prompt shows that observation whole.
OBSERVATION_COMMANDS_HEADER = "Crafting commands:"

#: The conditional command context of the later-step input, when commands are available.
COMMAND_BLOCK = "Available crafting commands for this episode:\n{commands}\n"

#: One record of the serialised history; records are joined by single spaces.
HISTORY_RECORD = "[Observation {index}: '{observation}', Action {index}: '{action}']"
