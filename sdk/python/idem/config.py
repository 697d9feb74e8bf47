"""The handler's configuration: the key/values under ``[handler.config]`` in
the host's config file (for instance a payment provider's base URL).

    base_url = idem.config.require("payment_base_url")
    if idem.config.get("charge_payment") == "false":
        ...
"""

from __future__ import annotations

from ._errors import Permanent
from ._wit import config as wit

__all__ = ["get", "require"]


def get(key: str) -> str | None:
    """The value configured for ``key``, or ``None``."""
    return wit.get(key)


def require(key: str) -> str:
    """The value configured for ``key``; a missing key raises ``Permanent``
    naming it (retrying will not make the operator add it)."""
    value = wit.get(key)
    if value is None:
        raise Permanent(f"config key `{key}` is not set for this handler")
    return value
