"""Project settings (Kedro defaults unless stated)."""

from resail_pipeline.hooks import (
    DeviceMemoryHook,
    NodeTimingHook,
    PreflightHook,
    RunFolderHook,
    run_value,
)

HOOKS = (RunFolderHook(), NodeTimingHook(), DeviceMemoryHook(), PreflightHook())

CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # an environment (smoke, paper, local) overrides single keys, not whole parameter sections
    "merge_strategy": {"parameters": "soft"},
    # ${run:env, ...} and ${run:experiment, ...} in the catalog: the run's resolved parameters
    "custom_resolvers": {"run": run_value},
}
