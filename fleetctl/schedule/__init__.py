"""``fleetctl schedule``, the pure part (:mod:`.systemd`)."""

from .systemd import *  # noqa: F403
from .systemd import DEFAULT_TIMEOUT, __all__  # noqa: F401
