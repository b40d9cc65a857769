"""The error every hetfl command reports as one line (`hetfl <verb>: error: ...`), in a module of its own:
the CLI needs it for every command, and short jobs (`hetfl split`, `hetfl trace`) need nothing else of
hetfl.config, whose imports (yaml, the algorithm catalog and its plugin entry points) cost ≈ 0.1 s."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is not allowed; the message names key, value and what is allowed."""
