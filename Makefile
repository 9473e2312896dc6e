# Developer commands (each is one line you can also run by hand).
PYTHON ?= .venv/bin/python

.PHONY: test api-docs readme demo-record own-data-record

test:            ## the default test suite (what CI runs)
	$(PYTHON) -m pytest

api-docs:        ## HTML API reference from the docstrings (pdoc; extra "docs") into build/api
	$(PYTHON) -m pdoc -o build/api rnnlab $$($(PYTHON) -c "$(MODULES)")

# the package's modules (pdoc walks only the names of rnnlab.__all__, which lists the library's
# names, not its modules)
MODULES = import pkgutil, rnnlab; print(*(f'rnnlab.{m.name}' for m in pkgutil.iter_modules(rnnlab.__path__) if m.name[0] != '_'))

readme:          ## regenerate the README's tables from the committed run records
	$(PYTHON) -m rnnlab.bench.docsync README.md

demo-record:     ## rerun the demo and record it in docs/demo with the host it reproduces on (then `make readme`)
	$(PYTHON) -m rnnlab.cli demo --out demo-out --fresh --record docs/demo && $(PYTHON) tools/demo_host.py > docs/demo/host.json

own-data-record: ## rerun docs/own-data.md's five commands, record them in docs/own-data and regenerate its table
	$(PYTHON) tools/own_data.py --record && $(PYTHON) -m rnnlab.bench.docsync docs/own-data.md
