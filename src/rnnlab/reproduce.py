"""The name ``rnnlab reproduce`` has always imported from; the ledger lives in ``rnnlab.ledger``."""

from .ledger import collect, ledger, main_ledger

__all__ = ["collect", "ledger", "main_ledger"]
