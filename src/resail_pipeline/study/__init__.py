"""A study: several experiments of the cycle pipeline side by side, then one report.

A plan (YAML, ``conf/base/study.yml`` unless the configuration environment has its own) lists the
experiments; each is ``kedro run --pipelines=cycle --only-missing-outputs`` under its own
``run.experiment`` with its method, its number of cycles (``RESAIL_CYCLES``) and its parameter
overrides. The report pipeline then reads every experiment of the environment's data folder.
Everything a run finishes is kept: killing the study anywhere and starting it again redoes
nothing finished (the initial policy's evaluation and cycle 1's corpus are shared by all). An
experiment listed twice with more cycles continues from where the first entry stopped.

Every experiment's wall time goes to ``data/08_reporting/<plan>-<env>.csv``, one row per invocation
(``started``), with the largest resident memory of any process that invocation ran: read from
``/proc`` at every rewrite while its processes run, and from the resource usage of the Kedro run
and the children it waited for once it ends. A running experiment's row is rewritten every minute,
so a study killed anywhere (``SIGKILL`` included) keeps the time it spent, to the minute: such a row
has an empty ``exit_code``. The time of a study interrupted and resumed is the sum of its rows. An
experiment whose last cycle is already evaluated is passed over without starting Kedro, and without
a row.

    python -m resail_pipeline.study --env study             # the comparison (make study)
    python -m resail_pipeline.study --env study --tier 1    # its first tier (make study TIER=1)
    python -m resail_pipeline.study --env study --plan conf/study/budgets.yml

The plan is checked whole before anything runs or is copied: its YAML, its keys, each experiment's
method, cycles, tier and name (not ``shared``, cycle 0's folder; a name listed again continues its
run, with the same method and overrides and no fewer cycles), the data tags (``params.data_tag``,
``cycle_0_from``: folder names, never a path out of ``data/``), the folders its runs write
(``bootstrap.build_dir``: under ``data/``) and ``--tier`` (one of the plan's tiers). What pairs the
cells is the plan's alone: an experiment may not set ``data_tag`` or ``evaluate``. A refusal is one
line naming the field, and the exit status is 2.

A plan may take its cycle 0 from another data folder of the same environment (``cycle_0_from:``,
that folder's data tag): the initial policy's record, reference episodes, fixed Experience, probe
set and evaluation depend on the policy and the evaluation settings only, so a plan that changes
neither (a budget check run again at another budget) copies them instead of playing them again.
They are copied whole, once, into a folder that has none of cycle 0 yet, after the evaluation
settings the plan's runs would play (the plan's, else the environment's) are checked against the
episodes they describe.

A plan may pre-register a rule (``rule:``) that chooses among its candidates once they are
evaluated, from each one's cycle-1 paired difference from cycle 0 and its 95% interval:
``largest_harmless`` takes the largest value of ``parameter`` among the ``method``'s experiments
whose interval has an upper bound >= 0 in every split and view (the first cycle does no
measurable harm); ``largest_gain`` takes the value whose ordinary view gains most (its mean
difference over the splits) among those whose ordinary-view interval lies above zero in every
split (the first cycle teaches), else the largest harmless value, reported as a gain not met.
The rule is applied after the report once cycle 0 and every candidate are evaluated (a tier
without them leaves it for later); the table of every candidate and the choice go to
``data/08_reporting/<folder>/rule.md``, with cycle 0's privileged lead and whether the premise
holds (the lead's interval above zero in every split, and a gain) where cycle 0 was evaluated in
both views.

A plan may take the value of a parameter from another plan's rule (``chosen_by:``, a plan file
beside it): before anything runs, that plan's rule is applied to its candidates' evaluations in
its own data folder and the value it chooses is set for every experiment, so that a grid runs at
the rate a pre-registered check chose, with no hand in between. The first choice is recorded
beside the plan's report (``chosen_by.json``), and a later sitting whose rule chooses otherwise is
refused. A candidate not yet evaluated, a rule that chose nothing, or a plan that sets the
parameter itself is refused in one line.

A grid's variance over training runs is measured by training it again with another training seed
(``--training-seed S``): every key of ``TRAINING_SEED_KEYS`` (the collection's tasks and
decoding, a model's summaries, the scoring's sampled responses, the updates' order and samples)
set to ``S``, in the folder ``<the grid's>-training-seed<S>``, with the grid's cycle 0 copied
there first (no training seed changes it). The plan's tiers (``--tier``) or one cell (``--rerun
EXPERIMENT --cycle N``, with the experiment it is compared with, cycles 1 to N) run there as the
grid's do, resumable, with their time rows in ``<plan>-<env>-training-seed<S>.csv``; then every
comparison of the report that two or more seeds reached goes to ``data/08_reporting/<the grid's
folder>/training-seeds.md`` and ``.csv``: each training seed's paired difference, their mean with
its 95% interval over tasks, and their sample SD over seeds (written again by every later run of the
grid or of a seed, as their cells move).

    python -m resail_pipeline.study --env study --tier 1 --training-seed 1
    python -m resail_pipeline.study --env study --rerun oel_resail --cycle 3 --training-seed 1
"""

from __future__ import annotations

from typing import Any

# the ``x as x`` imports: importable from here (the tests import them), not in ``__all__``
from resail_pipeline.study.cells import (
    EVALUATION_FILES,
    finished,
    take_cycle_0,
    write_training_seeds,
)
from resail_pipeline.study.plan import (
    Experiment,
    Rule,
    StudyPlan,
    data_folder,
    load_plan,
    with_training_seed,
)
from resail_pipeline.study.plan import plan_path as plan_path
from resail_pipeline.study.rule import RuleOutcome, apply_rule, unevaluated, with_choice
from resail_pipeline.study.rule import write_rule as write_rule
from resail_pipeline.study.runner import rerun_cell, retrain_cell, run_cycle_0, run_study

__all__ = [
    "EVALUATION_FILES",
    "Experiment",
    "Rule",
    "RuleOutcome",
    "StudyPlan",
    "apply_rule",
    "data_folder",
    "finished",
    "load_plan",
    "main",
    "rerun_cell",
    "retrain_cell",
    "run_cycle_0",
    "run_study",
    "take_cycle_0",
    "unevaluated",
    "with_choice",
    "with_training_seed",
    "write_training_seeds",
]


def __getattr__(name: str) -> Any:
    # ``main`` is imported on first use: importing ``__main__`` with the package would make
    # ``python -m resail_pipeline.study`` warn that it is loaded already
    if name == "main":
        from resail_pipeline.study.__main__ import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
