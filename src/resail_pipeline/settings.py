"""Project settings (Kedro defaults unless stated)."""

from resail_pipeline.hooks import DeviceMemoryHook, NodeTimingHook, PreflightHook

HOOKS = (NodeTimingHook(), DeviceMemoryHook(), PreflightHook())

CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # an environment (smoke, paper, local) overrides single keys, not whole parameter sections
    "merge_strategy": {"parameters": "soft"},
}
