"""Project settings (Kedro defaults unless stated)."""

from resail_pipeline.hooks import NodeTimingHook

HOOKS = (NodeTimingHook(),)

CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
}
