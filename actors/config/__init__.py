"""vmpooler's configuration: YAML (vmpooler 3.x format) plus environment, parsed once.

Call :func:`load_config` once at startup and pass the resulting frozen :class:`Config`
around; nothing else should read the YAML document or ``os.environ``. Problems are reported
all at once in a :class:`ConfigError`; non-fatal remarks are in ``Config.notes`` for the
caller to log (this package does not log).
"""

from vmpooler.actors.config.loader import bundled_config_path, load_config
from vmpooler.actors.config.model import (
    Config,
    DnsConfig,
    GlobalSettings,
    MetricsSettings,
    PoolConfig,
    ProviderConfig,
    RedisSettings,
)
from vmpooler.actors.config.problems import ConfigError, ConfigProblem, ConfigRefusedError
from vmpooler.actors.config.render import render_config

__all__ = [
    "Config",
    "ConfigError",
    "ConfigProblem",
    "ConfigRefusedError",
    "DnsConfig",
    "GlobalSettings",
    "MetricsSettings",
    "PoolConfig",
    "ProviderConfig",
    "RedisSettings",
    "bundled_config_path",
    "load_config",
    "render_config",
]
