# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# node_bootstrap must work with the standard library and pynvml alone: checked in a venv without the
# function's dependencies (pydantic, cloud SDKs, paramiko).
NODE_VENV := .venv-node

.PHONY: demo test install dev node-env sshd vermin bench clean ros-schemas lock package-check

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(BIN)/.dev-installed: $(BIN)/.installed
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

install: $(BIN)/.installed
dev: $(BIN)/.dev-installed

# .venv-node's interpreter: a real Python 3.6 (the oldest system Python a node has, Alibaba Cloud Linux 3's)
# where this machine has one, so that the tests running node code as a node does (tests/node/nodecli.py's
# NODE_PYTHON) run it on 3.6; else $(PYTHON), and only vermin checks node code against 3.6. Each candidate
# must run: a pyenv shim named python3.6 exists (and fails) where pyenv has no 3.6 selected.
ifeq ($(origin NODE_PYTHON),undefined)
NODE_PYTHON := $(shell for p in python3.6 /usr/bin/python3.6 /usr/local/bin/python3.6 \
  "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/3.6*/bin/python3.6 /opt/python/3.6*/bin/python3.6; do \
  "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 6); print(sys.executable)' 2>/dev/null && exit; \
  done; echo $(PYTHON))
endif

# The interpreter chosen, as a file rewritten only when the choice changes: .venv-node is rebuilt then.
NODE_CHOICE := .cache/node-python
$(NODE_CHOICE): FORCE
	@mkdir -p $(@D)
	@echo '$(NODE_PYTHON)' | cmp -s - $@ || echo '$(NODE_PYTHON)' > $@

# nvidia-ml-py below 14 installs with 3.6's pip (18.1) and imports on 3.6: its metadata has no Requires-Python.
$(NODE_VENV)/.installed: pyproject.toml $(NODE_CHOICE)
	rm -rf $(NODE_VENV)
	$(NODE_PYTHON) -m venv $(NODE_VENV)
	# (from /: an old pip reads the working folder's egg-info and warns about the function's dependencies)
	cd / && $(CURDIR)/$(NODE_VENV)/bin/python -m pip install -q 'nvidia-ml-py>=12.535,<14'
	touch $@

node-env: $(NODE_VENV)/.installed
	@$(NODE_VENV)/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 6))' || echo ".venv-node runs" \
	  "$$($(NODE_VENV)/bin/python -V 2>&1), not 3.6: node code is checked against 3.6 by vermin only"

.PHONY: FORCE
FORCE:

# template.yml is checked against the ROS resource schemas Alibaba Cloud publishes in its ros-cdk packages
# (tests/support/ros_schema.py reads them offline): the wheels alone, pinned, no dependencies.
ROS_CDK := .cache/ros-cdk
ROS_CDK_VERSION := 1.15.0
$(ROS_CDK)/.done: Makefile $(BIN)/.installed
	mkdir -p $(ROS_CDK)
	$(BIN)/python -m pip download -q --no-deps -d $(ROS_CDK) ros-cdk-fc3==$(ROS_CDK_VERSION) \
	  ros-cdk-ram==$(ROS_CDK_VERSION) ros-cdk-cs==$(ROS_CDK_VERSION) ros-cdk-sls==$(ROS_CDK_VERSION)
	touch $@

ros-schemas: $(ROS_CDK)/.done

# The SSH transport is tested against a real OpenSSH server on loopback.
sshd:
	@test -x /usr/sbin/sshd || command -v sshd >/dev/null 2>&1 || { \
	  echo "installing openssh-server for the SSH tests"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openssh-server >/dev/null; }

# Node code runs on the node's system Python (3.6 on Alibaba Cloud Linux 3); function code on 3.10.
vermin: dev
	$(BIN)/vermin --no-tips --violations -t=3.6- node_bootstrap
	$(BIN)/vermin --no-tips --violations -t=3.10- functions

demo: install
	$(BIN)/ack-mig-hook demo

# The test control plane of the kube_real tests (tests/controlplane: etcd, the real kube-apiserver and the
# disruption controller in one Go program), built once per Kubernetes version into .cache (minutes the first
# time). Without a Go toolchain those tests are skipped, one line in pytest's summary says so; under CI
# (CI=true) a missing Go fails the run.
GO ?= $(shell command -v go 2>/dev/null || { test -x /usr/local/go/bin/go && echo /usr/local/go/bin/go; })
K8S_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" && NF == 2 {print $$2}' tests/controlplane/go.mod)
CONTROLPLANE := .cache/controlplane/$(K8S_VERSION)/controlplane
$(CONTROLPLANE): tests/controlplane/go.mod tests/controlplane/go.sum $(wildcard tests/controlplane/*.go)
	@echo "building the test control plane (Kubernetes $(K8S_VERSION)): minutes the first time"
	mkdir -p $(@D)
	cd tests/controlplane && nice $(GO) build -trimpath -ldflags='-s -w' -o $(CURDIR)/$@.tmp .
	mv $@.tmp $@

.PHONY: controlplane
ifneq ($(GO),)
controlplane: $(CONTROLPLANE)
else
controlplane:
	@if [ "$$CI" = true ]; then echo "CI=true but no Go toolchain: the kube_real tests cannot run" >&2; exit 1; fi
endif

# Three workers on a 2-core machine: about half of a test's time is spent waiting (sshd, the API servers, the
# node processes, deadlines), so a third worker fills it (3,651 tests: 640 s with two workers, 435 s with three,
# 1.65 cores busy). Every test owns its ports and directories.
test: dev node-env sshd vermin ros-schemas controlplane
	$(NODE_VENV)/bin/python tests/node_import_check.py
	$(BIN)/python -m pytest -n 3

# The code package's dependency lock (functions/commands/stack/requirements-fc.txt): resolved on a CPython 3.10 (FC's
# runtime; ACK_MIG_FC_PYTHON=/path/to/python3.10 if it is not on PATH or in pyenv), pinned by SHA-256.
lock: dev
	$(BIN)/python -m functions.commands.stack.lock

# The real package from the real index, imported by python3.10 (minutes: kept out of `make test`, run by CI).
package-check: dev
	$(BIN)/python -m pytest checks -q -p no:cacheprovider

# Deliberate bugs planted one at a time in a throwaway copy, each against its subsystem's tests
# (scripts/mutants.py); prints the catch rate. Not part of `make test`: it runs the subsystems' tests once
# per mutant (about 5 minutes on 2 cores).
.PHONY: mutation
mutation: dev node-env sshd
	$(BIN)/python scripts/mutation.py

bench: dev sshd
	$(BIN)/python bench/run.py --quick

# The property tests alone, with fresh random examples and ten times as many (Hypothesis profile "wide",
# tests/conftest.py); `make test` draws fixed ones. Not part of `make test`.
.PHONY: fuzz
fuzz: dev node-env sshd
	$(BIN)/python -m pytest -q -m hypothesis --hypothesis-profile=wide

clean:
	rm -rf $(VENV) $(NODE_VENV) .pytest_cache .hypothesis *.egg-info .cache
