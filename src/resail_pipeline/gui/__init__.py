"""GUI agents on AITZ: episodes in the release's layout (and a generator of synthetic ones), a
vision-language policy, and PI sensitivity as an offline data filter (section 4.3).

Screens and actions are scored by :mod:`resail_pipeline.evaluation.gui_actions`; the prompts are
appendix G's, in :mod:`resail_pipeline.prompts.gui`.
"""
