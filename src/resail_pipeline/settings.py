"""Project settings (Kedro defaults unless stated)."""

CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
}
