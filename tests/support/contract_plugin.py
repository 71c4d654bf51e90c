"""A pytest plugin (loaded by tests/conftest.py): after every test, each request that reached an emulator
over the wire, each answer it gave and each answer field the product read is checked against the
official SDK models (tests/support/contract.py). A test that breaks the contract fails in teardown with
the list of problems. ``@pytest.mark.contract_exempt("why")`` exempts a test that sends a malformed
request on purpose.
"""

import pytest

from tests.support import contract

MAX_LISTED = 20


def pytest_configure(config):
    config.addinivalue_line("markers", "contract_exempt(why): this test breaks the API contract on purpose")


@pytest.fixture(autouse=True)
def api_contract(request, monkeypatch):
    """Records what the product reads from each ECS / Auto Scaling answer, then checks everything."""
    contract.new_exchanges()  # what earlier tests left is theirs
    reads = []
    try:
        from functions.cloud.rpc import RpcClient
    except ImportError:  # pragma: no cover - the function's dependencies are always in .venv
        RpcClient = None
    if RpcClient is not None:
        original = RpcClient.call

        def call(self, action, params):
            seen = set()
            reads.append((self.product, self.version, action, seen))
            return contract.track(original(self, action, params), seen)

        monkeypatch.setattr(RpcClient, "call", call)
    yield
    if request.node.get_closest_marker("contract_exempt"):
        contract.new_exchanges()
        return
    problems = contract.check_exchanges(contract.new_exchanges())
    for product, version, action, seen in reads:
        if (product, version) not in contract.SDKS:
            continue
        for path in sorted(seen):
            problem = contract.check_read(product, version, action, path)
            if problem and problem not in problems:
                problems.append(problem)
    if problems:
        more = "" if len(problems) <= MAX_LISTED else "\n... and %d more" % (len(problems) - MAX_LISTED)
        pytest.fail("API contract broken (official SDK models, tests/support/contract.py):\n  "
                    + "\n  ".join(problems[:MAX_LISTED]) + more, pytrace=False)
