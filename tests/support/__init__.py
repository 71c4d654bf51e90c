"""Shared test infrastructure: real local servers and fixtures the area test suites build on."""
