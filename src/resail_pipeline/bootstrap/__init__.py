"""The initial policy (cycle 0) of the embedded default, and how one is built from scratch.

:func:`resail_pipeline.initial_policy.resolve_initial_policy` is what the ``bootstrap`` pipeline
calls: a configured checkpoint, else the reference policy shipped in the repository, else one built
here (cached; this package). Importing the package loads none of its modules. Building runs on
the non-test tasks only:

- :mod:`.environments`: what a build covers in each environment (TextCraft, ALFWorld): its
  demonstration and evaluation splits, and the settings it cannot honour;
- :mod:`.demonstrations`: the environment's expert (TextCraft's exact planner, ALFWorld's planner
  expert) plays with injected mistakes and replans from the real state; each step's expert action
  is the training target;
- :mod:`.vocabulary`: a word-level tokenizer trained on the environment's own text, with the
  templates' fixed fragments as single tokens;
- :mod:`.packing`: both views of each step (ordinary, and privileged with the rules-based summary
  of another demonstration of the task) packed behind their shared prefix;
- :mod:`.cloning`: behaviour cloning on the response tokens, resumable, within a time budget;
- :mod:`.build`: the whole build, its cache key and manifest;
- :mod:`.reference`: the dual-view evaluation of a policy, recorded in its manifest.

``python -m resail_pipeline.bootstrap`` runs the same calls from the command line.
"""
