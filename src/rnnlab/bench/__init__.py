"""The lab: the project's own measurements of the library, and the documents made from them.

* :mod:`rnnlab.bench.speed`: the speed benchmark (``rnnlab bench speed``);
* :mod:`rnnlab.bench.ensemble_bench`, :mod:`rnnlab.bench.small_bench`: one stacked ensemble
  against separate runs (``rnnlab bench ensemble``), and small models against their floor;
* :mod:`rnnlab.bench.benchrecord`: the conditions a timing record carries, and its caption;
* :mod:`rnnlab.bench.benchdocs`: the tables and sentences the docs show from timing records;
* :mod:`rnnlab.bench.docsync`: the generated blocks of Markdown files (``python -m
  rnnlab.bench.docsync README.md``);
* :mod:`rnnlab.bench.doctor`: the on-device self-check (``rnnlab doctor``).

The lab depends on the library; nothing in the library depends on it. Nothing is imported here:
``import rnnlab.bench.docsync`` stays free of torch.
"""
