"""Render the ordinary and privileged view of one step from the same history.

The user message carries the whole episode history (up to the step limit); the privileged view
is the ordinary message with one outcome-matched summary inserted after it (appendix G). Chat
formatting is applied separately, by :func:`resail_pipeline.prompts.chat.chat_prompt`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from resail_pipeline.prompts import alfworld, gui, textcraft
from resail_pipeline.prompts.common import INSERT_SEPARATOR, OUTCOMES, PRIVILEGED_INSERTS
from resail_pipeline.prompts.history import EpisodeHistory, Turn


@dataclass(frozen=True)
class Summary:
    """An accepted experience summary: the PI ``c_tau`` of one trajectory.

    ``text`` starts with the outcome's heading ("Guidance summary:" / "Failure analysis:").
    """

    outcome: str
    text: str

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"summary outcome: expected one of {OUTCOMES}, got {self.outcome!r}")


def _history_records(template: str, turns: tuple[Turn, ...], observation: Callable) -> str:
    return " ".join(
        template.format(index=i, observation=observation(i, turn), action=turn.action)
        for i, turn in enumerate(turns, start=1)
    )


def _textcraft_without_commands(text: str, commands: tuple[str, ...]) -> str:
    """The initial TextCraft observation with its crafting-command block taken out.

    The commands are re-inserted once per later prompt in their own block, so the first history
    record keeps only what else the observation said (the goal line).
    """
    if not commands:
        return text
    kept = [
        line
        for line in text.split("\n")
        if line not in commands and line != textcraft.OBSERVATION_COMMANDS_HEADER
    ]
    return "\n".join(kept).strip()


def render_textcraft(history: EpisodeHistory) -> str:
    initial = history.initial
    if history.step_count == 0:
        return textcraft.FIRST_STEP.format(observation=history.current_observation)

    def observation(index: int, turn: Turn) -> str:
        if index == 1:
            return _textcraft_without_commands(turn.observation, initial.commands)
        return turn.observation

    command_block = (
        textcraft.COMMAND_BLOCK.format(commands="\n".join(initial.commands))
        if initial.commands
        else ""
    )
    return textcraft.LATER_STEP.format(
        goal=initial.task,
        step_count=history.step_count,
        history=_history_records(textcraft.HISTORY_RECORD, history.turns, observation),
        command_block=command_block,
        observation=history.current_observation,
    )


def format_admissible(actions: tuple[str, ...] | None) -> str:
    """ALFWorld's admissible-action list, one quoted action per line."""
    items = "\n".join(alfworld.ADMISSIBLE_ITEM.format(action=a) for a in actions or ())
    return alfworld.ADMISSIBLE_OPEN + items + alfworld.ADMISSIBLE_CLOSE


def render_alfworld(history: EpisodeHistory) -> str:
    admissible = format_admissible(history.admissible_actions)
    if history.step_count == 0:
        return alfworld.FIRST_STEP.format(
            observation=history.current_observation, admissible_actions=admissible
        )
    return alfworld.LATER_STEP.format(
        task=history.initial.task,
        step_count=history.step_count,
        history_length=history.step_count,
        history=_history_records(
            alfworld.HISTORY_RECORD, history.turns, lambda _i, turn: turn.observation
        ),
        current_step=history.step_count + 1,
        observation=history.current_observation,
        admissible_actions=admissible,
    )


#: env name -> ordinary-view user message of the next step.
RENDERERS: dict[str, Callable[[EpisodeHistory], str]] = {
    "textcraft": render_textcraft,
    "alfworld": render_alfworld,
}


def privileged_insert(summary: Summary) -> str:
    """The appendix-G insert for ``summary``'s outcome, with the summary text filled in."""
    return PRIVILEGED_INSERTS[summary.outcome].format(summary=summary.text.strip())


def add_privileged(ordinary_message: str, summary: Summary) -> str:
    """The privileged view of a step, from its ordinary-view user message."""
    return ordinary_message + INSERT_SEPARATOR + privileged_insert(summary)


def render_user_message(history: EpisodeHistory, summary: Summary | None = None) -> str:
    """The user message of the next step: ordinary view, or privileged when ``summary`` is given."""
    try:
        render = RENDERERS[history.env]
    except KeyError:
        raise ValueError(f"env: no prompt templates for {history.env!r}") from None
    message = render(history)
    return message if summary is None else add_privileged(message, summary)


def render_gui_action(
    instruction: str, previous_actions: list[str] | tuple[str, ...], remark: str | None = None
) -> str:
    """The user message of a GUI action call (appendix G, "GUI action input"): ordinary view, or
    privileged when ``remark`` (an accepted ``<remark>...</remark>`` block) is given. The image
    position is :data:`gui.IMAGE_PLACEHOLDER`, the only one (the remark's are taken out); the
    system message is :data:`gui.ACTION_SYSTEM` and the tool is :data:`gui.TOOL_DEFINITION`."""
    progress = (
        "\n".join(
            gui.PROGRESS_RECORD.format(index=i, action=a)
            for i, a in enumerate(previous_actions, start=1)
        )
        or gui.PROGRESS_NONE
    )
    return gui.ACTION_USER.format(
        instruction=instruction,
        guideline_block=""
        if remark is None
        else gui.GUIDELINE_BLOCK.format(remark=gui.without_placeholders(remark)),
        progress=progress,
        image=gui.IMAGE_PLACEHOLDER,
    )


def render_gui_summary(instruction: str, steps: list[tuple[str, str | None]]) -> str:
    """The user message of the GUI summary call (appendix G, "GUI summary input").

    ``steps`` holds, in trajectory order, ``(correct_action, student_attempt)``; the attempt is
    ``None`` where the student handled the step correctly; each failed step has one
    :data:`gui.SUMMARY_IMAGE_PLACEHOLDER` (an attempt's own placeholders are taken out). The system
    message is :data:`gui.SUMMARY_SYSTEM`.
    """
    records = [
        gui.SUMMARY_STEP_CORRECT.format(index=i, action=action)
        if attempt is None
        else gui.SUMMARY_STEP_FAILED.format(
            index=i,
            image=gui.SUMMARY_IMAGE_PLACEHOLDER,
            action=action,
            attempt=gui.without_placeholders(attempt),
        )
        for i, (action, attempt) in enumerate(steps, start=1)
    ]
    return (
        gui.SUMMARY_USER_HEAD.format(instruction=instruction)
        + "".join(records)
        + (gui.SUMMARY_USER_TAIL)
    )


def gui_action_messages(
    instruction: str, previous_actions: Sequence[str], remark: str | None = None
) -> list[dict[str, str]]:
    """The chat messages of a GUI action call: :data:`gui.ACTION_SYSTEM` and
    :func:`render_gui_action`'s user message (the tool is passed to the chat template)."""
    user = render_gui_action(instruction, list(previous_actions), remark)
    return [{"role": "system", "content": gui.ACTION_SYSTEM}, {"role": "user", "content": user}]


def gui_summary_messages(
    instruction: str, steps: Sequence[tuple[str, str | None]]
) -> list[dict[str, str]]:
    """The chat messages of a GUI summary call: :data:`gui.SUMMARY_SYSTEM` and
    :func:`render_gui_summary`'s user message."""
    user = render_gui_summary(instruction, list(steps))
    return [{"role": "system", "content": gui.SUMMARY_SYSTEM}, {"role": "user", "content": user}]
