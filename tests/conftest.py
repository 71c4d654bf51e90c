"""Plugins every test runs under."""

pytest_plugins = ("tests.support.contract_plugin",)
