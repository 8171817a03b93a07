"""``python -m pinwise ARGS`` runs the ``pinwise`` command this package installed."""
from pinwise import main

main()
