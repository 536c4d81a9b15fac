"""``python -m fleetctl``: the same as the ``fleetctl`` console script."""

from .cli import main

main(prog_name="fleetctl")
