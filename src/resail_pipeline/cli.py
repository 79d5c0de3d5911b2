"""Project commands: Kedro's own ``kedro run``, with configuration errors on one line.

Kedro loads this module's ``cli`` group and lets its commands replace the built-in ones of the
same name. ``run`` is Kedro's ``run`` (same options, same behaviour) except that a configuration
error (:class:`~resail_pipeline.config.ConfigError`: a parameter out of range, an unknown key,
an initial policy or a shared corpus that differs from what the run asks for), a checkpoint that
cannot be used, or AITZ episodes that are missing or malformed print one line naming the field,
value and what is allowed, and exit with status 2, instead of a page of traceback; so does a
``--pipelines`` name that is not a pipeline of the project or a ``RESAIL_CYCLES`` that is not a
positive integer (both checked before a session starts), and
such an error raised while Kedro loads or saves a dataset (it arrives wrapped in Kedro's
``DatasetError``), and a table that breaks its schema or a file that cannot be read or written
there (``SchemaError``, ``OSError``, pyarrow's errors of a file that is no Parquet: one line
naming the dataset and what is wrong), or in a
node (a table a node reads that breaks its schema, a staging folder it cannot write: one line
naming the file). Every other error keeps its traceback: a ``ValueError`` from a node is a defect
of the code or of data no check anticipated, and where it was raised is what a report of it
needs.

Like ``settings.py``, this is a file Kedro looks for by name, so it imports Kedro; the library
does not.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import click
from kedro.framework.cli.project import run as kedro_run
from kedro.io import DatasetError
from pyarrow.lib import ArrowException

from resail_pipeline.checkpoints import CheckpointError
from resail_pipeline.config import ConfigError
from resail_pipeline.gui.episodes import EpisodeError
from resail_pipeline.pipeline_registry import pipeline_names
from resail_pipeline.pipelines.cycle.pipeline import num_cycles
from resail_pipeline.schemas import SchemaError

#: errors whose message says all a user needs: what to change, and where
USER_ERRORS = (ConfigError, CheckpointError, EpisodeError)
#: errors of a dataset's file (a table that breaks its schema, a folder that cannot be written,
#: a file that is no Parquet): one line when Kedro's loading or saving wraps them, with the
#: dataset Kedro names
FILE_ERRORS = (SchemaError, OSError, ArrowException)


class UserError(click.ClickException):
    """Printed by click as ``Error: <message>``, exit status 2."""

    exit_code = 2


def user_error(error: BaseException) -> BaseException | None:
    """``error`` itself, or the one it wraps, if it is one of :data:`USER_ERRORS`."""
    return _caused_by(error, USER_ERRORS)


def _caused_by(
    error: BaseException | None, kinds: tuple[type[BaseException], ...]
) -> BaseException | None:
    """``error`` itself, or the first error it wraps, that is one of ``kinds``."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kinds):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def check_pipeline_names(names: list[str] | tuple[str, ...] | str | None) -> None:
    """Raise :class:`ConfigError` naming the project's pipelines if a requested one is not."""
    if isinstance(names, str):
        names = [names]
    available = pipeline_names()
    unknown = sorted(set(names or ()) - set(available))
    if unknown:
        raise ConfigError(
            f"--pipelines: no pipeline named {', '.join(map(repr, unknown))}; "
            f"the pipelines are {', '.join(available)}"
        )


def one_line_errors(command: click.Command) -> click.Command:
    """A copy of ``command`` whose :data:`USER_ERRORS`, bare or wrapped in a ``DatasetError``,
    print as one line, and which refuses an unknown ``--pipelines`` name before it runs."""
    callback = command.callback

    @functools.wraps(callback)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            check_pipeline_names(kwargs.get("pipelines"))
            check_pipeline_names(kwargs.get("pipeline"))
            num_cycles()  # every pipeline is built when the registry loads, the cycle's too
            return callback(*args, **kwargs)
        except USER_ERRORS as error:
            raise UserError(str(error)) from None
        except FILE_ERRORS as error:  # raised in a node: the message names the file
            raise UserError(" ".join(str(error).split())) from None
        except DatasetError as error:
            cause = user_error(error)
            if cause is not None:
                raise UserError(str(cause)) from None
            cause = _caused_by(error, FILE_ERRORS)
            if cause is None:
                raise
            # Kedro's first line names the dataset and its file; the cause says what is wrong
            where = str(error).strip().splitlines()[0].rstrip(".")
            raise UserError(f"{where}: {' '.join(str(cause).split())}") from None

    guarded_command = copy.copy(command)
    guarded_command.callback = guarded
    return guarded_command


@click.group(name="resail_pipeline")
def cli() -> None:
    """Commands of the resail_pipeline project."""


cli.add_command(one_line_errors(kedro_run), name="run")
