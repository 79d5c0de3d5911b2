"""Project settings (Kedro defaults unless stated)."""

import warnings

from resail_pipeline.hooks import (
    DeviceMemoryHook,
    JournalHook,
    NodeTimingHook,
    PreflightHook,
    RunConfigLoader,
    TrackingHook,
    run_value,
)

# pluggy calls the last registered first: the checks, then tracking
HOOKS = (
    NodeTimingHook(),
    DeviceMemoryHook(),
    JournalHook(),
    TrackingHook(),
    PreflightHook(),
)

# Kedro's loader, resolving the run's folders (${run:...}) per session
CONFIG_LOADER_CLASS = RunConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # an environment (smoke, paper, local) overrides single keys, not whole parameter sections
    "merge_strategy": {"parameters": "soft"},
    # ${run:env, ...} and ${run:experiment, ...} in the catalog: the run's resolved parameters
    "custom_resolvers": {"run": run_value},
}
# Kedro registers custom resolvers through an OmegaConf call it marks deprecated itself; the warning
# would head every run's log and is not the project's to act on
warnings.filterwarnings("ignore", message=r"register_new_resolver\(\) is deprecated")
