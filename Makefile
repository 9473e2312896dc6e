# Developer commands (each is one line you can also run by hand).
PYTHON ?= .venv/bin/python

.PHONY: test api-docs readme demo-record

test:            ## the default test suite (what CI runs)
	$(PYTHON) -m pytest

api-docs:        ## HTML API reference from the docstrings (pdoc; extra "docs") into build/api
	$(PYTHON) -m pdoc -o build/api rnnlab

readme:          ## regenerate the README's tables from the committed run records
	$(PYTHON) -m rnnlab.docsync README.md

demo-record:     ## rerun the demo and record it in docs/demo (then `make readme`)
	$(PYTHON) -m rnnlab.cli demo --out demo-out --fresh --record docs/demo
