"""The reproduction ledger: the four papers' published values (``published``), their claims as
rules over run records (``claims``, with the tests of ``stats``), the records themselves
(``records``) and the generated ``REPRODUCTION.md`` and README line (``document``; the README's
block is kept current by ``rnnlab.bench.docsync``, which also serves the run and timing tables).

``rnnlab reproduce ledger records -o REPRODUCTION.md`` regenerates the ledger;
``rnnlab reproduce collect RUNS -o records/NAME`` adds finished runs' small files (``metrics.jsonl``
and ``task.json`` xz-compressed); ``rnnlab reproduce compact records`` compresses a tree of
records written before.
"""

from .document import collect, compact, ledger, main_compact, main_ledger, summary_line
from .records import Evidence, load_records

__all__ = ["Evidence", "collect", "compact", "ledger", "load_records", "main_compact", "main_ledger", "summary_line"]
